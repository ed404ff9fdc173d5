/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A segment's side of the node keeper (keep.h): the owner of a kept segment
 * asks mooncake-segmentd for its pages with one CREATE (create or attach)
 * and checks what comes back before mapping it: the segment is this user's
 * (or the one named), of the allocation size, sealed against shrinking and
 * growing, so that no rank can ever SIGBUS on it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/linux-compat.h"
#include "base/tracked-fd.h"
#include "mooncake/segment.h"
#include "route/keeper-client.h"
#include "route/keeper-join.h"
#include "blob.h"
#include "keep.h"

/* How long connecting to the keeper may take. */
#define CONNECT_TIMEOUT_MS 10000
/* A cold CREATE answers once the keeper has committed every page, and the
 * keeper serves one request at a time: a minute, and 10 s per GiB (a tenth
 * of the commit speed seen on a small VM), before the wait is an error and
 * never a hang. */
#define REPLY_BASE_MS	 60000
#define REPLY_PER_GIB_MS 10000

#define KEEP_FLAGS_KNOWN                                                     \
	(MOONCAKE_SEGMENT_KEEP_REPLACE | MOONCAKE_SEGMENT_KEEP_ATTACH_ONLY | \
	 MOONCAKE_SEGMENT_KEEP_CREATE_ONLY | MOONCAKE_SEGMENT_KEEP_OWNER)

/* Every keep field at zero, as options_init and a zeroed struct leave them:
 * another owner is a flag, so that zero never means root's segment. */
static bool keep_options_unset(const struct mooncake_segment_options *opt)
{
	return !opt->keep_identity && !opt->keep_identity_bytes && !opt->keep_flags && !opt->keep_sharing &&
	       !opt->keep_gid && !opt->keep_owner_uid;
}

static bool owner_named(const struct mooncake_segment_options *opt)
{
	return (opt->keep_flags & MOONCAKE_SEGMENT_KEEP_OWNER) != 0;
}

int mc_keep_check_options(const struct mooncake_segment_options *opt)
{
	char why[160];

	if (!opt->keep_name) {
		if (keep_options_unset(opt))
			return 0;
		return mc_error(EINVAL,
				"Shared segment keep_identity, keep_flags, keep_sharing, keep_gid and "
				"keep_owner_uid need keep_name: set it, or leave them at zero");
	}
	if (!mc_keeper_name_valid(opt->keep_name, strlen(opt->keep_name), why, sizeof(why)))
		return mc_error(EINVAL, "Shared segment keep_name is not valid: %s", why);
	if (!opt->mmap)
		return mc_error(EINVAL,
				"Shared segment keep_name '%s': a kept segment is host memory; use mmap=true",
				opt->keep_name);
	if (opt->numa_node != MOONCAKE_SEGMENT_NUMA_AUTO)
		return mc_error(EINVAL,
				"Shared segment keep_name '%s': the keeper places a kept segment's pages, so "
				"numa_node must be automatic (-1), got %d; place the keeper instead "
				"(numactl or CPUAffinity= in its unit)",
				opt->keep_name, opt->numa_node);
	if (opt->keep_identity_bytes > MOONCAKE_SEGMENT_KEEP_IDENTITY_MAX ||
	    (opt->keep_identity_bytes && !opt->keep_identity))
		return mc_error(EINVAL,
				"Shared segment keep_identity must be at most %d bytes and not NULL when "
				"keep_identity_bytes is set (got %u bytes at %p)",
				MOONCAKE_SEGMENT_KEEP_IDENTITY_MAX, opt->keep_identity_bytes,
				opt->keep_identity);
	if (opt->keep_flags & ~KEEP_FLAGS_KNOWN || (opt->keep_flags & MOONCAKE_SEGMENT_KEEP_ATTACH_ONLY &&
						    opt->keep_flags & MOONCAKE_SEGMENT_KEEP_CREATE_ONLY))
		return mc_error(
			EINVAL,
			"Shared segment keep_flags 0x%x: the known flags are REPLACE, ATTACH_ONLY and "
			"CREATE_ONLY (0x%x), and ATTACH_ONLY excludes CREATE_ONLY",
			opt->keep_flags, KEEP_FLAGS_KNOWN);
	if (opt->keep_sharing > MOONCAKE_SEGMENT_KEEP_SHARE_ANY ||
	    (opt->keep_gid && opt->keep_sharing != MOONCAKE_SEGMENT_KEEP_SHARE_GROUP))
		return mc_error(
			EINVAL,
			"Shared segment keep_sharing must be 0 (this uid), 1 (keep_gid's members) or 2 "
			"(any uid), and keep_gid is for 1 only (got sharing %u, gid %u)",
			opt->keep_sharing, opt->keep_gid);
	if (opt->keep_owner_uid && !owner_named(opt))
		return mc_error(
			EINVAL,
			"Shared segment keep_owner_uid %u is read only with MOONCAKE_SEGMENT_KEEP_OWNER in "
			"keep_flags: add the flag to attach to that user's segment, or leave it at 0",
			opt->keep_owner_uid);
	return 0;
}

uint64_t mc_keep_fold(uint64_t fingerprint, const struct mooncake_segment_options *opt)
{
	uint64_t h = fingerprint;

	if (!opt->keep_name)
		return fingerprint;
	h = mc_fnv1a_bytes(h, "keep", 4);
	h = mc_fnv1a_bytes(h, opt->keep_name, strlen(opt->keep_name) + 1);
	h = mc_fnv1a_u64(h, opt->keep_identity_bytes);
	h = mc_fnv1a_bytes(h, opt->keep_identity, opt->keep_identity_bytes);
	h = mc_fnv1a_u64(h, opt->keep_sharing);
	h = mc_fnv1a_u64(h, opt->keep_gid);
	/* Another owner named, or (all ones) the owner rank's own segment. */
	return mc_fnv1a_u64(h, owner_named(opt) ? opt->keep_owner_uid : UINT64_MAX);
}

_Static_assert(sizeof(((struct mc_keep *)0)->name) == MC_KEEPER_NAME_MAX + 1, "a kept name fits");

/* @declaration for the keeper when it can travel: printable ASCII of at most
 * MC_KEEPER_DECLARATION_MAX bytes; else none (the keeper then names the
 * fingerprint, not the field). */
static void fill_declaration(const char *declaration, struct mc_keeper_request *req)
{
	size_t len;

	if (!declaration)
		return;
	len = strnlen(declaration, MC_KEEPER_DECLARATION_MAX + 1);
	if (len > MC_KEEPER_DECLARATION_MAX)
		return;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)declaration[i] < 0x20 || (unsigned char)declaration[i] > 0x7e)
			return;
	memcpy(req->declaration, declaration, len);
	req->declaration_bytes = (uint16_t)len;
}

static void fill_request(const struct mooncake_segment_options *opt, const char *declaration,
			 uint64_t layout_fingerprint, uint64_t size, uint64_t page_size,
			 uint64_t control_bytes, struct mc_keeper_request *req)
{
	memset(req, 0, sizeof(*req));
	req->type = MC_KEEPER_CREATE;
	snprintf(req->name, sizeof(req->name), "%s", opt->keep_name);
	req->fingerprint = layout_fingerprint;
	fill_declaration(declaration, req);
	req->size = size;
	req->page_size = page_size;
	/* The control area is the group's own: a new group starts it anew, in
	 * an area the keeper makes for it, so that a rank that cannot reach
	 * this process gets it from the keeper (JOIN). */
	req->control_bytes = control_bytes;
	req->world_size = opt->world_size;
	req->flags =
		MC_KEEPER_CREATE_GROUP_CONTROL | (opt->hugetlb ? MC_KEEPER_CREATE_HUGETLB : 0) |
		((opt->keep_flags & MOONCAKE_SEGMENT_KEEP_REPLACE) ? MC_KEEPER_CREATE_REPLACE : 0) |
		((opt->keep_flags & MOONCAKE_SEGMENT_KEEP_ATTACH_ONLY) ? MC_KEEPER_CREATE_ATTACH_ONLY : 0) |
		((opt->keep_flags & MOONCAKE_SEGMENT_KEEP_CREATE_ONLY) ? MC_KEEPER_CREATE_CREATE_ONLY : 0);
	req->sharing = (uint8_t)opt->keep_sharing;
	req->gid = opt->keep_gid;
	req->identity_bytes = (uint16_t)opt->keep_identity_bytes;
	if (opt->keep_identity_bytes)
		memcpy(req->identity, opt->keep_identity, opt->keep_identity_bytes);
	if (owner_named(opt)) {
		req->owner_given = true;
		req->owner_uid = opt->keep_owner_uid;
	}
}

/* The keeper's refusal as create()'s error, its sentence quoted. */
static int refused(const struct mooncake_segment_options *opt, const char *path,
		   const struct mc_keeper_reply *rep)
{
	int err;

	switch (rep->status) {
	case ENOENT:
	case EEXIST:
	case EBUSY:
	case ENOMEM:
	case ENOSPC:
	case EACCES:
	case EMFILE:
	case EINVAL:
	case ENOTSUP:
		err = (int)rep->status;
		break;
	case EPERM:
		err = EACCES;
		break;
	default:
		err = EIO;
	}
	if (rep->status == EEXIST && rep->field)
		return mc_error(
			err,
			"Shared segment keep_name '%s': the node keeper at %s holds it with another %s: "
			"%s",
			opt->keep_name, path, mc_keeper_field_name(rep->field), rep->text);
	return mc_error(err, "Shared segment keep_name '%s': the node keeper at %s refused it (%s): %s",
			opt->keep_name, path, strerror((int)rep->status), rep->text);
}

/* What the keeper answered is what we asked for, whoever else asks. */
static int check_reply(const struct mooncake_segment_options *opt, const char *path,
		       const struct mc_keeper_reply *rep, uint64_t page_size, uint64_t alloc_size,
		       uint64_t control_bytes)
{
	/* Both as the keeper's user namespace sees them, which a client in a
	 * user namespace of its own (rootless containers) does not share. */
	uint32_t expected_uid = owner_named(opt) ? opt->keep_owner_uid : rep->caller_uid;

	if (rep->owner_uid != expected_uid)
		return mc_error(
			EACCES,
			"Shared segment keep_name '%s': the node keeper at %s handed uid %u's segment, "
			"not uid %u's; refusing pages that another user controls (to attach to "
			"another user's shared segment, name it: MOONCAKE_SEGMENT_KEEP_OWNER and keep_owner_uid, "
			"keep_owner= in Python)",
			opt->keep_name, path, (unsigned)rep->owner_uid, (unsigned)expected_uid);
	if (rep->size != alloc_size || rep->page_size != page_size)
		return mc_error(EPROTO,
				"Shared segment keep_name '%s': the node keeper at %s answered %llu bytes in "
				"pages of %llu, this create needs %llu in pages of %llu",
				opt->keep_name, path, (unsigned long long)rep->size,
				(unsigned long long)rep->page_size, (unsigned long long)alloc_size,
				(unsigned long long)page_size);
	if (rep->descriptors != 2 || rep->control_bytes != control_bytes || !rep->group_token)
		return mc_error(EPROTO,
				"Shared segment keep_name '%s': the node keeper at %s answered without the "
				"group's control area of %llu bytes (%u descriptors, %llu bytes, token %s); "
				"it is older than this library: upgrade it",
				opt->keep_name, path, (unsigned long long)control_bytes, rep->descriptors,
				(unsigned long long)rep->control_bytes, rep->group_token ? "set" : "none");
	return 0;
}

/* The descriptor is the sealed file of @alloc_size bytes that every rank
 * can trust, and can write: a write seal would make every rank's shared
 * writable mapping fail (EPERM) far from its cause. */
static int check_file(const struct mooncake_segment_options *opt, const char *path, int fd,
		      uint64_t alloc_size)
{
	const int needed = F_SEAL_SHRINK | F_SEAL_GROW, unwritable = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
	struct stat st;
	int seals;

	if (fstat(fd, &st) != 0)
		return mc_error_sys(EIO, errno,
				    "Shared segment keep_name '%s': fstat of the keeper's memfd failed",
				    opt->keep_name);
	seals = fcntl(fd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != alloc_size || seals < 0 ||
	    (seals & needed) != needed)
		return mc_error(
			EPROTO,
			"Shared segment keep_name '%s': the node keeper at %s sent a file of %llu bytes "
			"with seals 0x%x, not a memfd of %llu bytes sealed against shrinking and "
			"growing",
			opt->keep_name, path, (unsigned long long)st.st_size, seals < 0 ? 0 : seals,
			(unsigned long long)alloc_size);
	if (seals & unwritable)
		return mc_error(EPROTO,
				"Shared segment keep_name '%s': the node keeper at %s sent a memfd sealed "
				"against writing (seals 0x%x); its pages cannot be mapped writable",
				opt->keep_name, path, seals);
	return 0;
}

static int reply_timeout_ms(uint64_t alloc_size)
{
	uint64_t gib = (alloc_size + (UINT64_C(1) << 30) - 1) >> 30,
		 ms = REPLY_BASE_MS + gib * REPLY_PER_GIB_MS;

	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

int mc_keep_acquire(const struct mooncake_segment_options *opt, const char *declaration,
		    uint64_t layout_fingerprint, uint64_t size, uint64_t page_size, uint64_t alloc_size,
		    uint64_t control_bytes, struct mc_keep *keep)
{
	struct mc_keeper_request req;
	struct mc_keeper_reply *rep = malloc(sizeof(*rep));
	struct mc_keeper_conn conn;
	int err;

	if (!rep)
		return mc_segment_error(ENOMEM, "out of memory");
	fill_request(opt, declaration, layout_fingerprint, size, page_size, control_bytes, &req);
	err = mc_keeper_open(&conn, NULL, CONNECT_TIMEOUT_MS);
	/* fork() may run while the keeper commits; no child ever holds the pages. */
	if (!err)
		err = mc_keeper_exchange_tracked(&conn, &req, rep, keep->fds, keep->tracking,
						 reply_timeout_ms(alloc_size));
	if (!err && rep->status)
		err = refused(opt, conn.path, rep);
	if (!err)
		err = check_reply(opt, conn.path, rep, page_size, alloc_size, control_bytes);
	if (!err)
		err = check_file(opt, conn.path, keep->fds[0], alloc_size);
	if (!err) {
		keep->warm = (rep->attach_flags & MC_KEEPER_ATTACH_WARM) != 0;
		keep->generation = rep->generation;
		keep->keeper_owner_uid = rep->owner_uid;
		keep->group_token = rep->group_token;
		mc_log(MOONCAKE_SEGMENT_LOG_INFO,
		       "Shared segment keep_name '%s': %s generation %llu from the node keeper at %s%s",
		       opt->keep_name, keep->warm ? "attached to" : "created",
		       (unsigned long long)rep->generation, conn.path,
		       rep->attach_flags & MC_KEEPER_ATTACH_REPLACED ? " (replaced the old one)" : "");
	} else {
		mc_keep_drop_fds(keep);
	}
	mc_keeper_close(&conn);
	free(rep);
	return err;
}

void mc_keep_drop_fds(struct mc_keep *keep)
{
	for (int i = 0; i < 2; i++) {
		if (keep->fds[i] >= 0)
			mc_fd_close(&keep->tracking[i]);
		keep->fds[i] = -1;
	}
}
