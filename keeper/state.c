/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table's metadata for a restarted keeper (keeper.h; the format is
 * doc/keeper-state.md and state-format.h).  A memfd, stored once in the
 * service manager's descriptor store as "state" and rewritten in place: the
 * store keeps the same open file, so what this keeper writes the next one
 * reads.  Two slots, A and B: a save writes the older slot's payload where
 * it cannot touch the newest one's, then that slot's header, so a keeper
 * killed at any point leaves the newest complete state readable.  The
 * loader takes the newest valid slot, then each segment's descriptors from
 * the store ("pages-GEN", "control-GEN"), checks them (a sealed memfd of the
 * recorded size) and drops, logs and removes from the store whatever does
 * not fit: a bad state is input, never a reason to crash.
 *
 * Not thread-safe: one caller at a time (the keeper's main loop).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/little-endian.h"
#include "keeper.h"
#include "route/keeper-wire.h"
#include "state-format.h"

/* The state memfd, -1 until the first load or save, and what this process
 * knows of its slots (it is their only writer). */
static int state_fd = -1;
static int newest_slot = -1; /* 0 A, 1 B, -1 none valid */
static struct state_slot slots[2];

/* --- the format: pure functions -------------------------------------------- */

/* A record is the wire's common bytes, then byte 61 and bytes 68..71 of its own. */
_Static_assert(STATE_RECORD_FIXED == MC_KEEPER_RECORD_COMMON_BYTES + 4, "a state record's fixed bytes moved");

uint64_t state_checksum(const uint8_t *bytes, size_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < len; i++) {
		h ^= bytes[i];
		h *= UINT64_C(1099511628211);
	}
	return h;
}

static size_t padded(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* A record's declaration, after its identity: 2 bytes of length, then the bytes. */
static size_t declaration_bytes(const struct kept_segment *k)
{
	return k->declaration ? 2 + strlen(k->declaration) : 0;
}

/* A record's account uid, after its declaration: 4 bytes, only where it is
 * not the owner (a state without subordinate uids reads as before). */
static bool own_account(const struct kept_segment *k)
{
	return k->account_uid == k->record.owner_uid;
}

static size_t record_bytes(const struct kept_segment *k)
{
	return padded(STATE_RECORD_FIXED + strlen(k->record.name) + k->record.identity_bytes +
		      declaration_bytes(k) + (own_account(k) ? 0 : 4));
}

void state_image_free(struct state_image *image)
{
	for (size_t i = 0; image->segments && i < image->count; i++)
		free(image->segments[i].declaration);
	free(image->segments);
	image->segments = NULL;
	image->count = 0;
}

size_t state_payload_size(const struct kept_segment *const *segments, size_t count)
{
	size_t total = STATE_PAYLOAD_FIXED;

	if (count > UINT32_MAX)
		return 0;
	for (size_t i = 0; i < count; i++) {
		size_t name = strnlen(segments[i]->record.name, sizeof(segments[i]->record.name));

		if (name == 0 || name > MC_KEEPER_NAME_MAX ||
		    segments[i]->record.identity_bytes > MC_KEEPER_IDENTITY_MAX ||
		    (segments[i]->declaration &&
		     (!segments[i]->declaration[0] ||
		      strlen(segments[i]->declaration) > MC_KEEPER_DECLARATION_MAX)))
			return 0;
		total += record_bytes(segments[i]);
	}
	return total;
}

int state_payload_encode(const struct kept_segment *const *segments, size_t count, uint64_t next_generation,
			 uint8_t *out, size_t room)
{
	size_t need = state_payload_size(segments, count);
	uint8_t *p = out;

	if (need == 0)
		return -EINVAL;
	if (need > room || need > INT32_MAX)
		return -EMSGSIZE;
	memset(out, 0, need);
	mc_put_le64(p, next_generation);
	mc_put_le32(p + 8, (uint32_t)count);
	p += STATE_PAYLOAD_FIXED;
	for (size_t i = 0; i < count; i++) {
		const struct mc_keeper_segment *r = &segments[i]->record;
		size_t name = strlen(r->name);
		const char *declaration = segments[i]->declaration;

		mc_keeper_record_put_common(p, r);
		p[61] = (segments[i]->hugetlb ? STATE_KEEPER_HUGETLB : 0) |
			(segments[i]->handed_unseen ? STATE_KEEPER_UNSEEN : 0) |
			(declaration ? STATE_KEEPER_DECLARATION : 0) |
			(own_account(segments[i]) ? 0 : STATE_KEEPER_ACCOUNT);
		mc_put_le32(p + 68, r->warm_attaches);
		memcpy(p + STATE_RECORD_FIXED, r->name, name);
		memcpy(p + STATE_RECORD_FIXED + name, r->identity, r->identity_bytes);
		if (declaration) {
			uint8_t *d = p + STATE_RECORD_FIXED + name + r->identity_bytes;

			/* Bytes with their length before them, no terminator. */
			mc_put_le16(d, (uint16_t)strlen(declaration));
			memcpy(d + 2, declaration, mc_get_le16(d));
		}
		if (!own_account(segments[i]))
			mc_put_le32(p + STATE_RECORD_FIXED + name + r->identity_bytes +
					    declaration_bytes(segments[i]),
				    segments[i]->account_uid);
		p += record_bytes(segments[i]);
	}
	return (int)need;
}

static int refuse(char *why, size_t why_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t why_size, const char *fmt, ...)
{
	va_list ap;

	if (why && why_size) {
		va_start(ap, fmt);
		vsnprintf(why, why_size, fmt, ap);
		va_end(ap);
	}
	return -EPROTO;
}

static bool power_of_two(uint64_t v)
{
	return v && !(v & (v - 1));
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* One record at @p (@left bytes remain): its length in *used, or -EPROTO. */
static int decode_record(const uint8_t *p, size_t left, struct kept_segment *k, size_t *used, char *why,
			 size_t why_size)
{
	struct mc_keeper_segment *r = &k->record;
	char name_why[96];
	size_t name, identity, declaration = 0, extra = 0, account = 0, total;
	const uint8_t *d;

	if (left < STATE_RECORD_FIXED)
		return refuse(why, why_size, "truncated record");
	name = mc_get_le16(p + 62);
	identity = mc_get_le16(p + 64);
	if (name == 0 || name > MC_KEEPER_NAME_MAX)
		return refuse(why, why_size, "record name length %zu", name);
	if (identity > MC_KEEPER_IDENTITY_MAX)
		return refuse(why, why_size, "record identity length %zu", identity);
	d = p + STATE_RECORD_FIXED + name + identity;
	if (p[61] & STATE_KEEPER_DECLARATION) {
		/* Its length is read only once it lies within the payload. */
		if (STATE_RECORD_FIXED + name + identity + 2 > left)
			return refuse(why, why_size, "record's declaration length past the payload's end");
		declaration = mc_get_le16(d);
		if (declaration == 0 || declaration > MC_KEEPER_DECLARATION_MAX)
			return refuse(why, why_size, "record declaration length %zu", declaration);
		extra = 2 + declaration;
	}
	if (p[61] & STATE_KEEPER_ACCOUNT) {
		account = 4;
		extra += account;
	}
	total = padded(STATE_RECORD_FIXED + name + identity + extra);
	if (total > left)
		return refuse(why, why_size, "record of %zu bytes past the payload's end", total);
	if (!mc_keeper_name_valid((const char *)p + STATE_RECORD_FIXED, name, name_why, sizeof(name_why)))
		return refuse(why, why_size, "%s", name_why);
	for (size_t i = 0; i < declaration; i++)
		if (d[2 + i] < 0x20 || d[2 + i] > 0x7e)
			return refuse(why, why_size, "record declaration has byte 0x%02x at %zu", d[2 + i],
				      i);
	if (!all_zero(d + extra, total - STATE_RECORD_FIXED - name - identity - extra))
		return refuse(why, why_size, "record padding not zero");

	memset(k, 0, sizeof(*k));
	mc_keeper_record_get_common(p, r);
	r->warm_attaches = mc_get_le32(p + 68);
	memcpy(r->name, p + STATE_RECORD_FIXED, name);
	r->name[name] = '\0';
	memcpy(r->identity, p + STATE_RECORD_FIXED + name, identity);
	/* Without one, the owner's own: a state saved before accounts. */
	k->account_uid = account ? mc_get_le32(d + extra - account) : r->owner_uid;
	if (account && k->account_uid == r->owner_uid)
		return refuse(why, why_size, "\"%s\": an account uid that is its owner's", r->name);
	k->hugetlb = p[61] & STATE_KEEPER_HUGETLB;
	k->handed_unseen = (p[61] & STATE_KEEPER_UNSEEN) != 0;
	k->pages_fd = -1;
	k->control_fd = -1;

	if (p[61] & ~STATE_KEEPER_KNOWN)
		return refuse(why, why_size, "\"%s\": unknown keeper flags 0x%x", r->name, p[61]);
	if (!power_of_two(r->page_size))
		return refuse(why, why_size, "\"%s\": page size %" PRIu64 " is not a power of two", r->name,
			      r->page_size);
	if (r->size == 0 || r->size % r->page_size)
		return refuse(why, why_size,
			      "\"%s\": size %" PRIu64 " is not a positive multiple of the page size", r->name,
			      r->size);
	if (r->generation == 0 || r->generation == UINT64_MAX)
		return refuse(why, why_size, "\"%s\": generation %" PRIu64, r->name, r->generation);
	if (r->world_size == 0)
		return refuse(why, why_size, "\"%s\": world size 0", r->name);
	if (r->sharing > MC_KEEPER_SHARE_ANY || (r->sharing != MC_KEEPER_SHARE_GROUP && r->gid != 0))
		return refuse(why, why_size, "\"%s\": sharing %u with gid %" PRIu32, r->name, r->sharing,
			      r->gid);
	if (r->flags & ~MC_KEEPER_SEGMENT_FLAGS_KNOWN)
		return refuse(why, why_size, "\"%s\": unknown flags 0x%x", r->name, r->flags);
	/* Last, so that a refused record holds no memory. */
	if (declaration) {
		k->declaration = malloc(declaration + 1);
		if (!k->declaration)
			return -ENOMEM;
		memcpy(k->declaration, d + 2, declaration);
		k->declaration[declaration] = '\0';
	}
	*used = total;
	return 0;
}

static int by_generation(const void *a, const void *b)
{
	const struct kept_segment *x = *(const struct kept_segment *const *)a;
	const struct kept_segment *y = *(const struct kept_segment *const *)b;

	return (x->record.generation > y->record.generation) - (x->record.generation < y->record.generation);
}

static int by_name_and_owner(const void *a, const void *b)
{
	const struct kept_segment *x = *(const struct kept_segment *const *)a;
	const struct kept_segment *y = *(const struct kept_segment *const *)b;
	int order = strcmp(x->record.name, y->record.name);

	return order ? order
		     : (x->record.owner_uid > y->record.owner_uid) -
			       (x->record.owner_uid < y->record.owner_uid);
}

/* Into *@twice, a record the loader must refuse (NULL when none): one
 * generation twice, or one name of one owner twice where neither is
 * released.  Sorted, not pair by pair: every save checks what it writes,
 * and at 4,096 segments the pairs made a warm attach take 21 ms. */
static int find_twice(const struct kept_segment *segments, size_t count, const struct kept_segment **twice)
{
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	const struct kept_segment **sorted = malloc((count ? count : 1) * sizeof(struct kept_segment *));
	size_t live = 0, i;

	*twice = NULL;
	if (!sorted)
		return -ENOMEM;
	for (i = 0; i < count; i++)
		sorted[i] = &segments[i];
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	qsort(sorted, count, sizeof(struct kept_segment *), by_generation);
	for (i = 1; i < count && !*twice; i++)
		if (sorted[i - 1]->record.generation == sorted[i]->record.generation)
			*twice = sorted[i];
	for (i = 0; i < count; i++)
		if (!(segments[i].record.flags & MC_KEEPER_SEGMENT_RELEASED))
			sorted[live++] = &segments[i];
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	qsort(sorted, live, sizeof(struct kept_segment *), by_name_and_owner);
	for (i = 1; i < live && !*twice; i++)
		if (by_name_and_owner(&sorted[i - 1], &sorted[i]) == 0)
			*twice = sorted[i];
	free(sorted);
	return 0;
}

int state_payload_decode(const uint8_t *in, size_t len, struct state_image *image, char *why, size_t why_size)
{
	const struct kept_segment *twice = NULL;
	struct kept_segment *segments = NULL;
	size_t count, at;
	int err;

	memset(image, 0, sizeof(*image));
	if (len < STATE_PAYLOAD_FIXED)
		return refuse(why, why_size, "payload of %zu bytes is truncated", len);
	count = mc_get_le32(in + 8);
	if (mc_get_le32(in + 12) != 0)
		return refuse(why, why_size, "payload reserved bytes not zero");
	/* Every record takes at least its fixed part: a count cannot ask for more memory than the bytes justify. */
	if (count > (len - STATE_PAYLOAD_FIXED) / STATE_RECORD_FIXED)
		return refuse(why, why_size, "%zu records cannot fit in %zu bytes", count, len);
	if (count) {
		segments = calloc(count, sizeof(*segments));
		if (!segments)
			return -ENOMEM;
	}
	at = STATE_PAYLOAD_FIXED;
	for (size_t i = 0; i < count; i++) {
		size_t used = 0;

		err = decode_record(in + at, len - at, &segments[i], &used, why, why_size);
		if (err)
			goto fail;
		at += used;
	}
	if (at != len) {
		err = refuse(why, why_size, "%zu bytes after the last record", len - at);
		goto fail;
	}
	err = find_twice(segments, count, &twice);
	if (!err && twice)
		err = refuse(why, why_size, "\"%s\" (generation %" PRIu64 ") is there twice",
			     twice->record.name, twice->record.generation);
	if (err)
		goto fail;
	image->next_generation = mc_get_le64(in);
	image->count = count;
	image->segments = segments;
	return 0;
fail:
	image->segments = segments;
	image->count = count;
	state_image_free(image);
	return err;
}

void state_header_encode(const struct state_slot *slot, uint8_t out[STATE_HEADER_BYTES])
{
	memset(out, 0, STATE_HEADER_BYTES);
	mc_put_le32(out, STATE_SLOT_MAGIC);
	mc_put_le16(out + 4, STATE_VERSION);
	mc_put_le16(out + 6, STATE_HEADER_BYTES);
	mc_put_le64(out + 8, slot->sequence);
	mc_put_le64(out + 16, slot->offset);
	mc_put_le64(out + 24, slot->length);
	mc_put_le64(out + 32, slot->checksum);
	mc_put_le64(out + 56, state_checksum(out, 56));
}

int state_header_decode(const uint8_t *file, size_t len, unsigned int index, struct state_slot *slot,
			char *why, size_t why_size)
{
	const uint8_t *h;

	memset(slot, 0, sizeof(*slot));
	if (index > 1)
		return refuse(why, why_size, "no slot %u", index);
	if (len < (size_t)STATE_HEADER_BYTES * (index + 1))
		return refuse(why, why_size, "file of %zu bytes has no header %c", len, 'A' + index);
	h = file + (size_t)STATE_HEADER_BYTES * index;
	if (all_zero(h, STATE_HEADER_BYTES))
		return refuse(why, why_size, "slot %c never written", 'A' + index);
	if (mc_get_le32(h) != STATE_SLOT_MAGIC)
		return refuse(why, why_size, "slot %c: bad magic 0x%08" PRIx32, 'A' + index, mc_get_le32(h));
	if (mc_get_le64(h + 56) != state_checksum(h, 56))
		return refuse(why, why_size, "slot %c: header checksum mismatch", 'A' + index);
	if (mc_get_le16(h + 4) != STATE_VERSION || mc_get_le16(h + 6) != STATE_HEADER_BYTES)
		return refuse(why, why_size, "slot %c: version %u (header %u bytes), this keeper reads %u",
			      'A' + index, mc_get_le16(h + 4), mc_get_le16(h + 6), STATE_VERSION);
	if (!all_zero(h + 40, 16))
		return refuse(why, why_size, "slot %c: reserved bytes not zero", 'A' + index);
	slot->sequence = mc_get_le64(h + 8);
	slot->offset = mc_get_le64(h + 16);
	slot->length = mc_get_le64(h + 24);
	slot->checksum = mc_get_le64(h + 32);
	if (slot->sequence == 0)
		return refuse(why, why_size, "slot %c: sequence 0", 'A' + index);
	if (slot->offset < STATE_PAYLOAD_START || slot->offset % 8 || slot->offset > len ||
	    slot->length > len - slot->offset)
		return refuse(why, why_size,
			      "slot %c: payload at %" PRIu64 " of %" PRIu64
			      " bytes is outside the %zu-byte file",
			      'A' + index, slot->offset, slot->length, len);
	return 0;
}

int state_slot_decode(const uint8_t *file, size_t len, unsigned int index, struct state_slot *slot,
		      struct state_image *image, char *why, size_t why_size)
{
	char inner[192];
	int err;

	memset(image, 0, sizeof(*image));
	err = state_header_decode(file, len, index, slot, why, why_size);
	if (err)
		return err;
	if (state_checksum(file + slot->offset, slot->length) != slot->checksum)
		return refuse(why, why_size, "slot %c: payload checksum mismatch", 'A' + index);
	err = state_payload_decode(file + slot->offset, slot->length, image, inner, sizeof(inner));
	if (err == -EPROTO)
		return refuse(why, why_size, "slot %c: %s", 'A' + index, inner);
	return err;
}

/* --- the file: descriptors and the store ----------------------------------- */

static int write_all(int fd, const uint8_t *bytes, size_t len, uint64_t offset)
{
	while (len) {
		ssize_t n = pwrite(fd, bytes, len, (off_t)offset);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		bytes += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

/* The whole state file, read into a malloc'd buffer (*len bytes). */
static int read_file(int fd, uint8_t **bytes, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	size_t got = 0;

	*bytes = NULL;
	*len = 0;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EBADF;
	if ((uint64_t)st.st_size > STATE_FILE_MAX)
		return -EFBIG;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;

			free(buf);
			return err;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*bytes = buf;
	*len = got;
	return 0;
}

static uint64_t end_of(const struct state_slot *s)
{
	return s->offset + s->length;
}

int state_save(const struct kept_segment *const *segments, size_t count, uint64_t next_generation)
{
	struct state_slot slot;
	uint8_t header[STATE_HEADER_BYTES];
	uint8_t *payload;
	size_t need;
	unsigned int target;
	int n, err;

	if (!service_can_store())
		return 0; /* nobody would read it: the keeper said so at start */
	need = state_payload_size(segments, count);
	if (need == 0)
		return -EINVAL;
	if (state_fd < 0) {
		state_fd = memfd_create("mooncake-segmentd-state", MFD_CLOEXEC);
		if (state_fd < 0 || ftruncate(state_fd, STATE_PAYLOAD_START) != 0) {
			err = -errno;
			keeper_say(KEEPER_LOG_ERR, "cannot make the state memfd: %s", strerror(-err));
			if (state_fd >= 0)
				close(state_fd);
			state_fd = -1;
			return err;
		}
		err = service_store("state", state_fd);
		if (err) {
			keeper_say(KEEPER_LOG_ERR, "cannot store the state memfd: %s", strerror(-err));
			close(state_fd);
			state_fd = -1;
			return err;
		}
		newest_slot = -1;
	}
	payload = malloc(need);
	if (!payload)
		return -ENOMEM;
	n = state_payload_encode(segments, count, next_generation, payload, need);
	if (n < 0) {
		free(payload);
		return n;
	}
	/* Never write what the loader would refuse (two segments of one name and
	 * owner, or of one generation, a bad field): the previous state stays the newest. */
	{
		struct state_image check;
		char why[192];

		err = state_payload_decode(payload, need, &check, why, sizeof(why));
		state_image_free(&check);
		if (err) {
			keeper_say(KEEPER_LOG_ERR, "not saving a state the next keeper would refuse: %s",
				   err == -EPROTO ? why : strerror(-err));
			free(payload);
			return err == -EPROTO ? -EINVAL : err;
		}
	}

	/* The older slot (A when none is valid), its payload where it cannot
	 * touch the newest one's: first after the headers, else after it. */
	memset(&slot, 0, sizeof(slot));
	target = newest_slot < 0 ? 0 : 1 - (unsigned int)newest_slot;
	slot.sequence = newest_slot < 0 ? 1 : slots[newest_slot].sequence + 1;
	slot.offset = STATE_PAYLOAD_START;
	if (newest_slot >= 0 && slots[newest_slot].offset < STATE_PAYLOAD_START + (uint64_t)need)
		slot.offset = padded(end_of(&slots[newest_slot]));
	slot.length = (uint64_t)need;
	slot.checksum = state_checksum(payload, need);
	err = write_all(state_fd, payload, need, slot.offset);
	free(payload);
	if (!err) {
		/* Crash-safe from here: the header is what makes the new slot count. */
		state_header_encode(&slot, header);
		err = write_all(state_fd, header, sizeof(header), (uint64_t)STATE_HEADER_BYTES * target);
	}
	if (err) {
		keeper_say(KEEPER_LOG_ERR,
			   "cannot write the saved state: %s (a restart finds the previous one)",
			   strerror(-err));
		return err;
	}
	slots[target] = slot;
	newest_slot = (int)target;
	/* Past both payloads is slack from an earlier, larger state. */
	{
		uint64_t keep = STATE_PAYLOAD_START;
		struct stat st;

		for (unsigned int i = 0; i < 2; i++)
			if (slots[i].sequence && end_of(&slots[i]) > keep)
				keep = end_of(&slots[i]);
		if (fstat(state_fd, &st) == 0 && (uint64_t)st.st_size > keep + (UINT64_C(1) << 20))
			(void)!ftruncate(state_fd, (off_t)keep);
	}
	return 0;
}

/* A segment's descriptor from the store, checked: a memfd (F_GET_SEALS
 * works only on memfds) sealed against shrinking, as the library's own
 * check_owner_file() requires, of exactly @size bytes. */
static int take_checked(const char *fdname, uint64_t size, uint64_t hugetlb_page, char *why, size_t why_size)
{
	struct stat st;
	int fd, seals;

	fd = service_take(fdname);
	if (fd < 0) {
		snprintf(why, why_size, "no descriptor \"%s\" in the store", fdname);
		return -1;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || seals < 0)
		snprintf(why, why_size, "\"%s\" is not a memfd", fdname);
	else if ((uint64_t)st.st_size != size)
		snprintf(why, why_size, "\"%s\" holds %lld bytes, the state says %" PRIu64, fdname,
			 (long long)st.st_size, size);
	else if (!(seals & F_SEAL_SHRINK))
		snprintf(why, why_size, "\"%s\" is not sealed against shrinking", fdname);
	else if (hugetlb_page && (uint64_t)st.st_blksize != hugetlb_page)
		snprintf(why, why_size, "\"%s\" has %lld-byte pages, the state says HugeTLB %" PRIu64, fdname,
			 (long long)st.st_blksize, hugetlb_page);
	else
		return fd;
	close(fd);
	(void)service_remove(fdname);
	return -1;
}

static uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A first generation that no earlier keeper on this host gave, even one
 * whose state is lost: microseconds of CLOCK_REALTIME. */
static uint64_t fresh_generation(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u + 1;
}

static void release_segment(struct kept_segment *k)
{
	char name[64];

	if (k->pages_fd >= 0) {
		close(k->pages_fd);
		snprintf(name, sizeof(name), "pages-%" PRIu64, k->record.generation);
		(void)service_remove(name);
	}
	if (k->control_fd >= 0) {
		close(k->control_fd);
		snprintf(name, sizeof(name), "control-%" PRIu64, k->record.generation);
		(void)service_remove(name);
	}
	k->pages_fd = k->control_fd = -1;
}

int state_load(struct kept_segment **segments, size_t *count, uint64_t *next_generation)
{
	struct state_image image, best = { 0 };
	struct state_slot slot;
	uint8_t *file = NULL;
	size_t len = 0, kept = 0, dropped = 0;
	uint64_t max_generation = 0;
	char why[256];
	int err, fd;

	*segments = NULL;
	*count = 0;
	*next_generation = 1;

	fd = service_take("state");
	if (fd >= 0) {
		err = read_file(fd, &file, &len);
		if (err) {
			keeper_say(KEEPER_LOG_ERR, "the stored state is unreadable (%s): starting without it",
				   strerror(-err));
			close(fd);
			(void)service_remove("state");
		} else {
			state_fd = fd;
		}
	}
	newest_slot = -1;
	memset(slots, 0, sizeof(slots));
	for (unsigned int i = 0; file && i < 2; i++) {
		err = state_slot_decode(file, len, i, &slot, &image, why, sizeof(why));
		if (err == 0) {
			if (newest_slot < 0 || slot.sequence > slots[newest_slot].sequence) {
				state_image_free(&best);
				best = image;
				newest_slot = (int)i;
			} else {
				state_image_free(&image);
			}
			slots[i] = slot;
		} else if (err == -ENOMEM) {
			free(file);
			state_image_free(&best);
			return err;
		} else if (strstr(why, "never written") == NULL) {
			keeper_say(KEEPER_LOG_WARNING, "saved state: %s", why);
		}
		/* A slot that failed is the older one for the next save. */
	}
	free(file);
	if (state_fd >= 0 && newest_slot < 0)
		keeper_say(KEEPER_LOG_ERR,
			   "the stored state has no valid slot: the kept segments of the previous run "
			   "cannot be named and are freed");

	for (size_t i = 0; i < best.count; i++) {
		struct kept_segment *k = &best.segments[i];
		char fdname[64];

		if (k->record.generation > max_generation)
			max_generation = k->record.generation;
		snprintf(fdname, sizeof(fdname), "pages-%" PRIu64, k->record.generation);
		k->pages_fd = take_checked(fdname, k->record.size, k->hugetlb ? k->record.page_size : 0, why,
					   sizeof(why));
		if (k->pages_fd >= 0 && k->record.control_bytes) {
			snprintf(fdname, sizeof(fdname), "control-%" PRIu64, k->record.generation);
			k->control_fd = take_checked(fdname, k->record.control_bytes, 0, why, sizeof(why));
			if (k->control_fd < 0)
				release_segment(k);
		}
		if (k->pages_fd < 0) {
			keeper_say(KEEPER_LOG_ERR,
				   "kept segment \"%s\" (generation %" PRIu64 ") is dropped: %s",
				   k->record.name, k->record.generation, why);
			release_segment(k);
			free(k->declaration);
			k->declaration = NULL;
			dropped++;
			continue;
		}
		/* Nobody knows yet who maps it; the idle timeout counts from now. */
		k->record.mappers = MC_KEEPER_MAPPERS_UNKNOWN;
		k->last_mapped_ns = monotonic_ns();
		best.segments[kept++] = *k;
	}

	*next_generation = newest_slot >= 0 ? best.next_generation : fresh_generation();
	if (max_generation >= *next_generation)
		*next_generation = max_generation + 1;
	/* Orphans (descriptors no record names) still hold generations that a
	 * client may map: never give them again. */
	max_generation = service_stored_generation_max();
	if (max_generation >= *next_generation)
		*next_generation = max_generation + 1;

	if (kept == 0) {
		free(best.segments);
		best.segments = NULL;
	}
	*segments = best.segments;
	*count = kept;
	if (newest_slot >= 0 || kept)
		keeper_say(
			KEEPER_LOG_INFO,
			"restored %zu kept segment%s from the descriptor store (%zu dropped); next generation %" PRIu64,
			kept, kept == 1 ? "" : "s", dropped, *next_generation);
	/* What was dropped must not come back at the next restart. */
	if (dropped || (newest_slot >= 0 && *next_generation != best.next_generation)) {
		/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, as state_save() takes */
		const struct kept_segment **list = calloc(kept ? kept : 1, sizeof(*list));

		if (list) {
			for (size_t i = 0; i < kept; i++)
				list[i] = &(*segments)[i];
			(void)state_save(list, kept, *next_generation);
			free(list);
		}
	}
	return 0;
}
