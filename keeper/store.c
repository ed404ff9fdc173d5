/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of kept segments (keeper.h): create or attach, list, stat and
 * release, who may do which, the budget, the segment limit and the idle
 * timeout.  Names are per uid: the table's key is (name, owner uid), so that
 * nobody squats another user's name, and it is sorted by that key, so that
 * LIST pages through it from a cursor.  The per-uid limits count a
 * segment in its account (account.c: its creator's user, where the creator
 * was a subordinate uid or in a user namespace of that user), not its owner.  A segment released while mapped stays
 * as a RELEASED entry beside its key, invisible to names but counted in the
 * budget, until a mapper scan sees nobody map it: the budget counts memory,
 * not the table.  Mappers are counted by the scanner's thread (scanner.c),
 * one pass over /proc/PID/maps matching the memfds' device and inode, never
 * on the loop's: a request that needs the counts waits for a scan that
 * started after it came (a release, a replace, a create that a released
 * segment would refuse), or for one younger than --scan-cache-ms (STAT,
 * LIST), and every request waiting is answered by the same scan.  The scans
 * the table asks for itself (released segments still mapped, the idle
 * timeout) free what they find unmapped when they are done.  A process
 * whose maps the keeper may not read (one more privileged
 * than the keeper, like a container runtime's init) is reported honestly: a
 * segment with no mapper seen is "unknown" then, not 0.  The decisions
 * (release freed or deferred, replace, the idle timeout) go by the mappers
 * the keeper could see, and by where it handed the descriptors: a segment
 * handed to a peer whose maps it cannot read (another PID namespace, pid 0
 * in SO_PEERCRED) counts as mapped, mappers unknown, for replace and the
 * idle timeout until its owner releases it (handed_unseen, saved).  The
 * kernel never frees pages under any mapping anyway.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "declaration.h"
#include "keeper.h"

static const struct keeper_config *conf; /* main()'s, for the process's life */
static struct kept_segment **table;	 /* sorted by (name, owner uid, generation) */
static size_t table_count, table_room;
static uint64_t next_generation = 1;
static size_t committing_count; /* reserved segments whose pages a committer thread commits */

#define CONTROL_MAX (UINT64_C(1) << 30)
/* A group area is not freed unmapped sooner: its ranks JOIN within 10 s. */
#define GROUP_FORMING_NS (UINT64_C(10) * 1000000000u)
#define GROUP_SWEEP_NS	 (UINT64_C(60) * 1000000000u)

static uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t store_count(void)
{
	return (uint32_t)(table_count - committing_count);
}

/* (name, owner uid) against a segment: the table's order. */
static int key_cmp(const char *name, uint32_t owner, const struct kept_segment *seg)
{
	int order = strcmp(name, seg->record.name);

	if (order)
		return order;
	return owner < seg->record.owner_uid ? -1 : owner > seg->record.owner_uid;
}

static bool released(const struct kept_segment *seg)
{
	return (seg->record.flags & MC_KEEPER_SEGMENT_RELEASED) != 0;
}

/* The first index whose key is not below (@name, @owner); with @past, the
 * first whose key is above it (the end of that group). */
static size_t bound(const char *name, uint32_t owner, bool past)
{
	size_t low = 0, high = table_count;

	while (low < high) {
		size_t mid = low + (high - low) / 2;
		int order = key_cmp(name, owner, table[mid]);

		if (order > 0 || (past && order == 0))
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/* The index of @owner's live @name, or where a new one goes (the end of its
 * group: released segments of that key, generations increasing, stay before
 * it until nothing maps them); *@found says which. */
static size_t find(const char *name, uint32_t owner, bool *found)
{
	size_t i = bound(name, owner, false);

	for (; i < table_count && key_cmp(name, owner, table[i]) == 0; i++) {
		if (!released(table[i])) {
			*found = true;
			return i;
		}
	}
	*found = false;
	return i;
}

/* The index of the first segment whose name sorts after @name (any owner). */
static size_t after_name(const char *name)
{
	size_t low = 0, high = table_count;

	while (low < high) {
		size_t mid = low + (high - low) / 2;

		if (strcmp(table[mid]->record.name, name) <= 0)
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/* Whose segment @req names: the caller's own unless it names an owner. */
static uint32_t owner_of(const struct mc_keeper_request *req, const struct keeper_peer *peer)
{
	return req->owner_given ? req->owner_uid : (uint32_t)peer->uid;
}

/* A save owed for a change nobody needs at once after a crash (a warm
 * attach's count), and when it falls due (SAVE_DELAY_NS after the first). */
#define SAVE_DELAY_NS 1000000000u
static bool save_owed;
static uint64_t save_due_ns;

/* The table as it is saved: a segment still being committed is no part of
 * it (a stop or crash mid-commit must not leave a half-made one). */
static void save(void)
{
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, as state_save() takes */
	const struct kept_segment **kept = calloc(table_count ? table_count : 1, sizeof(*kept));
	size_t count = 0, i;
	int err;

	if (!kept) {
		keeper_log("cannot save the table for a restart: out of memory");
		return;
	}
	for (i = 0; i < table_count; i++)
		if (!table[i]->committing)
			kept[count++] = table[i];
	err = state_save(kept, count, next_generation);
	free(kept);
	save_owed = false;
	if (err)
		keeper_log("cannot save the table for a restart: %s", strerror(-err));
}

/* Each save writes the whole table (linear in the segments): changes a
 * crash may lose wait for the next save, at most SAVE_DELAY_NS, so that a
 * burst of warm attaches costs one save (store_tick(), store_stop()). */
static void save_soon(void)
{
	if (!save_owed)
		save_due_ns = monotonic_ns() + SAVE_DELAY_NS;
	save_owed = true;
}

static void fd_name(char *out, size_t size, const char *kind, uint64_t generation)
{
	snprintf(out, size, "%s-%" PRIu64, kind, generation);
}

static void free_segment(struct kept_segment *seg)
{
	char name[48];

	fd_name(name, sizeof(name), "pages", seg->record.generation);
	service_remove(name);
	if (seg->control_fd >= 0) {
		fd_name(name, sizeof(name), "control", seg->record.generation);
		service_remove(name);
		close(seg->control_fd);
	}
	for (unsigned int i = 0; i < MC_KEEPER_GROUPS_PER_SEGMENT; i++)
		if (seg->groups[i].token)
			close(seg->groups[i].fd);
	/* The kernel keeps the pages while any process still maps them. */
	if (seg->pages_fd >= 0)
		close(seg->pages_fd);
	free(seg->declaration);
	free(seg);
}

static size_t index_of(const struct kept_segment *seg)
{
	size_t i = bound(seg->record.name, seg->record.owner_uid, false);

	while (i < table_count && table[i] != seg)
		i++;
	return i;
}

static void remove_at(size_t index)
{
	struct kept_segment *seg = table[index];

	memmove(&table[index], &table[index + 1], (table_count - index - 1) * sizeof(struct kept_segment *));
	table_count--;
	free_segment(seg);
	save();
}

static int insert_at(size_t index, struct kept_segment *seg)
{
	if (table_count == table_room) {
		size_t room = table_room ? table_room * 2 : 64;
		struct kept_segment **grown = realloc(table, room * sizeof(struct kept_segment *));

		if (!grown)
			return -ENOMEM;
		table = grown;
		table_room = room;
	}
	memmove(&table[index + 1], &table[index], (table_count - index) * sizeof(struct kept_segment *));
	table[index] = seg;
	table_count++;
	return 0;
}

/* --- mappers ---------------------------------------------------------------- */

/* One scan at a time runs on the scanner's thread (scanner.c); the counts
 * come back to store_scan_done().  A request that needs counts waits for a
 * scan (the server parks it) instead of scanning itself: its ticket is the
 * first scan that starts after it came, and a segment's count is fresh for
 * it when that scan or a later one counted it (counted_by).  Reports (STAT,
 * LIST) also take the last scan's counts while they are younger than
 * --scan-cache-ms.  Every request waiting is answered by the same scan. */
static uint64_t scans_started, scans_done; /* serials */
static uint64_t scan_done_ns;		   /* CLOCK_MONOTONIC when the last one was done */
static struct scan_job *scanning;	   /* the one running; NULL when none */
static const char *scan_wanted;		   /* why the next one is wanted, once this one is done */
static uint64_t ticket;			   /* the request being handled: the first scan it may use */

/* Every segment counted as mapped, its mappers unknown: what a scan that
 * cannot run tells, so that nothing waits for ever and nothing is freed. */
static void count_blind(uint64_t serial)
{
	size_t i;

	for (i = 0; i < table_count; i++) {
		if (table[i]->committing)
			continue;
		table[i]->mappers_seen = 1;
		table[i]->record.mappers = MC_KEEPER_MAPPERS_UNKNOWN;
		table[i]->counted_by = serial;
		table[i]->last_mapped_ns = monotonic_ns();
	}
	scans_done = serial;
	scan_done_ns = monotonic_ns();
}

/* A key for the memfd @fd: @generation's pages (@group 0) or group area. */
static void add_scan_key(struct scan_job *job, int fd, uint64_t generation, unsigned int group)
{
	struct scan_key *key = &job->keys[job->count++];
	struct stat st;

	/* Never failing on an open memfd; if it did, inode 0 matches no mapping. */
	if (fstat(fd, &st) == 0) {
		key->major = major(st.st_dev);
		key->minor = minor(st.st_dev);
		key->ino = (uint64_t)st.st_ino;
	}
	key->generation = generation;
	key->group = group;
}

static void start_scan(const char *why)
{
	struct scan_job *job = calloc(1, sizeof(*job));
	uint64_t serial = ++scans_started;
	size_t i;
	int err = -ENOMEM;

	keeper_debug("mapper scan %" PRIu64 " for %s: /proc read for %zu segments", serial, why, table_count);
	if (job)
		job->keys = calloc(table_count ? table_count * (1 + MC_KEEPER_GROUPS_PER_SEGMENT) : 1,
				   sizeof(*job->keys));
	if (job && job->keys) {
		for (i = 0; i < table_count; i++) {
			/* A committing one has no pages yet: the scan after its commit counts it. */
			if (table[i]->committing)
				continue;
			add_scan_key(job, table[i]->pages_fd, table[i]->record.generation, 0);
			for (unsigned int g = 0; g < MC_KEEPER_GROUPS_PER_SEGMENT; g++)
				if (table[i]->groups[g].token)
					add_scan_key(job, table[i]->groups[g].fd, table[i]->record.generation,
						     g + 1);
		}
		job->serial = serial;
		job->started_ns = monotonic_ns();
		err = scanner_submit(job);
	}
	if (!err) {
		scanning = job;
		return;
	}
	keeper_log("cannot start a mapper scan (%s): every segment counts as mapped, mappers unknown",
		   strerror(-err));
	if (job)
		free(job->keys);
	free(job);
	count_blind(serial);
}

/* A scan that starts after now: the serial of the one that will answer. */
static uint64_t want_scan(const char *why)
{
	if (scanning) {
		if (!scan_wanted)
			scan_wanted = why;
		return scans_started + 1;
	}
	start_scan(why);
	return scans_started;
}

/* The request being handled waits for a scan (for @why) to count @seg. */
static struct store_wait wait_for_scan(const char *why)
{
	return (struct store_wait){ 0, false, want_scan(why) };
}

/* Whether @seg's count is fresh for the request being handled: what frees
 * pages (release, replace) goes by nothing older. */
static bool counted_since_asked(const struct kept_segment *seg)
{
	return seg->counted_by >= ticket;
}

/* Whether @seg's count will do for a report (STAT, LIST): fresh, or from
 * the last scan while it is younger than --scan-cache-ms. */
static bool counted_recently(const struct kept_segment *seg)
{
	return counted_since_asked(seg) ||
	       (seg->counted_by && seg->counted_by == scans_done &&
		monotonic_ns() - scan_done_ns < (uint64_t)conf->scan_cache_ms * 1000000u);
}

static int generation_order(const void *a, const void *b)
{
	const struct scan_key *x = a, *y = b;

	if (x->generation != y->generation)
		return x->generation < y->generation ? -1 : 1;
	return x->group < y->group ? -1 : x->group > y->group;
}

/* Close @seg's group areas that @job saw nobody map, handed out before the
 * scan began and longer ago than a group takes to form (its owner maps its
 * area as soon as it has it, its ranks JOIN within their 10 s limit): a
 * group that exited gives its memory back.  By the rule that frees released
 * pages (unmapped_at()): not when the segment went to a peer the keeper
 * cannot see, which may map the area too. */
static void free_unmapped_groups(struct kept_segment *seg, const struct scan_job *job, uint64_t now)
{
	unsigned int g;

	if (job->blind || seg->handed_unseen)
		return;
	for (g = 0; g < MC_KEEPER_GROUPS_PER_SEGMENT; g++) {
		struct group_area *area = &seg->groups[g];
		struct scan_key probe = { .generation = seg->record.generation, .group = g + 1 }, *key;

		if (!area->token || area->handed_ns >= job->started_ns ||
		    now - area->handed_ns < GROUP_FORMING_NS)
			continue;
		key = bsearch(&probe, job->keys, job->count, sizeof(*job->keys), generation_order);
		if (!key || key->mappers)
			continue;
		keeper_log("freed a group control area of '%s' (%" PRIu64 " bytes): no process maps it",
			   seg->record.name, area->bytes);
		close(area->fd);
		*area = (struct group_area){ 0, -1, 0, 0 };
	}
}

/* @job's counts into the records of the segments it counted (those made
 * since have none). */
static void take_counts(struct scan_job *job)
{
	uint64_t now = monotonic_ns();
	size_t i;

	qsort(job->keys, job->count, sizeof(*job->keys), generation_order);
	for (i = 0; i < table_count; i++) {
		struct kept_segment *seg = table[i];
		struct scan_key probe = { .generation = seg->record.generation }, *key;

		key = bsearch(&probe, job->keys, job->count, sizeof(*job->keys), generation_order);
		if (!key || seg->committing)
			continue;
		seg->mappers_seen = job->blind ? 1 : key->mappers;
		seg->record.mappers = job->blind || (!key->mappers && (job->unreadable || seg->handed_unseen))
					      ? MC_KEEPER_MAPPERS_UNKNOWN
					      : key->mappers;
		seg->counted_by = job->serial;
		if (seg->mappers_seen || seg->handed_unseen)
			seg->last_mapped_ns = now;
		free_unmapped_groups(seg, job, now);
	}
	scans_done = job->serial;
	scan_done_ns = now;
}

/* The pages' (device, inode) into @seg's record, from the descriptor the
 * keeper holds: what `mooncake-segment list` joins its scan by.  A memfd
 * keeps both for its life, across the keeper's restarts too (the
 * descriptor store holds the same file), where its name's "owner=PID"
 * names the keeper that made it.  fstat() of an open memfd does not fail;
 * if it did, the record says 0:0:0 (unknown) and list joins nothing. */
static void identify(struct kept_segment *seg)
{
	struct stat st;

	if (seg->pages_fd < 0 || fstat(seg->pages_fd, &st) != 0) {
		seg->record.dev_major = seg->record.dev_minor = 0;
		seg->record.ino = 0;
		return;
	}
	seg->record.dev_major = major(st.st_dev);
	seg->record.dev_minor = minor(st.st_dev);
	seg->record.ino = (uint64_t)st.st_ino;
}

/* Whether @seg may be mapped (after a scan), for what would free its pages
 * under a mapper (replace, the idle timeout): a process the keeper can see
 * maps it, or it was handed to one the keeper cannot see. */
static bool mapped(const struct kept_segment *seg)
{
	return seg->mappers_seen != 0 || seg->handed_unseen;
}

/* Whether the keeper can read @peer's maps: a client in another PID
 * namespace has pid 0 in SO_PEERCRED; a more privileged one refuses. */
static bool peer_visible(const struct keeper_peer *peer)
{
	char path[32];
	int fd;

	if (peer->pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)peer->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* A segment handed to a peer the keeper cannot see counts as mapped by it
 * from now on: its unmapping is invisible too. */
static void mark_unseen(struct kept_segment *seg, pid_t pid)
{
	if (seg->handed_unseen)
		return;
	seg->handed_unseen = true;
	keeper_log("'%s' of uid %u (generation %" PRIu64
		   ") went to pid %d, whose maps the keeper cannot read: "
		   "it counts as mapped (mappers unknown) until released",
		   seg->record.name, seg->record.owner_uid, seg->record.generation, (int)pid);
}

static void note_peer(struct kept_segment *seg, const struct keeper_peer *peer)
{
	if (!seg->handed_unseen && !peer_visible(peer))
		mark_unseen(seg, peer->pid);
}

/* --- replies ---------------------------------------------------------------- */

static void refuse(struct mc_keeper_reply *rep, int status, uint16_t field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void refuse(struct mc_keeper_reply *rep, int status, uint16_t field, const char *fmt, ...)
{
	va_list ap;

	rep->status = (uint32_t)status;
	rep->field = field;
	va_start(ap, fmt);
	vsnprintf(rep->text, sizeof(rep->text), fmt, ap);
	va_end(ap);
}

static bool in_group(const struct keeper_peer *peer, gid_t gid)
{
	size_t i;

	if (user_namespace_unmapped_gid(gid))
		return false;
	if (peer->gid == gid)
		return true;
	for (i = 0; i < peer->group_count; i++)
		if (peer->groups[i] == gid)
			return true;
	return false;
}

/* May @peer attach to (and STAT, LIST) @seg?  When not, the sentence. */
static bool may_attach(const struct kept_segment *seg, const struct keeper_peer *peer,
		       struct mc_keeper_reply *rep)
{
	const struct mc_keeper_segment *r = &seg->record;

	if (peer->uid == 0 || peer->uid == r->owner_uid || r->sharing == MC_KEEPER_SHARE_ANY)
		return true;
	if (r->sharing == MC_KEEPER_SHARE_GROUP && in_group(peer, r->gid))
		return true;
	if (rep) {
		if (r->sharing == MC_KEEPER_SHARE_GROUP)
			refuse(rep, EACCES, 0,
			       "uid %u may not use kept segment '%s': it belongs to uid %u and is shared with "
			       "group %u only (sharing group), which uid %u is not in",
			       (unsigned)peer->uid, r->name, (unsigned)r->owner_uid, (unsigned)r->gid,
			       (unsigned)peer->uid);
		else
			refuse(rep, EACCES, 0,
			       "uid %u may not use kept segment '%s': it belongs to uid %u and is shared with "
			       "nobody else (sharing uid); its creator can keep it with sharing group or any",
			       (unsigned)peer->uid, r->name, (unsigned)r->owner_uid);
	}
	return false;
}

static bool may_free(const struct kept_segment *seg, const struct keeper_peer *peer,
		     struct mc_keeper_reply *rep, const char *what)
{
	if (peer->uid == 0 || peer->uid == seg->record.owner_uid)
		return true;
	refuse(rep, EACCES, 0, "uid %u may not %s kept segment '%s': only its creator (uid %u) or root may",
	       (unsigned)peer->uid, what, seg->record.name, (unsigned)seg->record.owner_uid);
	return false;
}

/* @seg's control areas: its own and its groups' it still holds. */
static uint64_t control_bytes_held(const struct kept_segment *seg)
{
	uint64_t bytes = seg->record.control_bytes;
	unsigned int g;

	for (g = 0; g < MC_KEEPER_GROUPS_PER_SEGMENT; g++)
		if (seg->groups[g].token)
			bytes += seg->groups[g].bytes;
	return bytes;
}

/* @seg as STAT and LIST report it: its control bytes are every area held. */
static struct mc_keeper_segment reported(const struct kept_segment *seg)
{
	struct mc_keeper_segment r = seg->record;

	r.control_bytes = control_bytes_held(seg);
	return r;
}

/* Bytes and segments kept, released-but-mapped ones included: in all, and
 * counted in @account's per-uid limits (its own segments and those of its
 * subordinate uids and user namespaces, account.c). */
struct usage {
	uint64_t bytes, owner_bytes;
	size_t owner_segments;
};

static struct usage usage_of(uint32_t account)
{
	struct usage u = { 0 };
	size_t i;

	for (i = 0; i < table_count; i++) {
		uint64_t bytes = table[i]->record.size + control_bytes_held(table[i]);

		u.bytes += bytes;
		if (table[i]->account_uid == account) {
			u.owner_bytes += bytes;
			u.owner_segments++;
		}
	}
	return u;
}

static int holding_order(const void *a, const void *b)
{
	const struct kept_segment *const *x = a, *const *y = b;
	uint32_t p = (*x)->account_uid, q = (*y)->account_uid;

	return p < q ? -1 : p > q;
}

/* The account holding the most entries (@by_bytes false) or bytes, with what
 * it holds in @its, for a refusal of a node-wide limit to name: one sort of
 * the table by owner, so a client looping on such refusals costs the loop
 * little.  0 and nothing held without the memory to sort. */
static uint32_t largest_holder(bool by_bytes, struct usage *its)
{
	struct kept_segment **by_owner = calloc(table_count ? table_count : 1, sizeof(struct kept_segment *));
	uint64_t most_held = 0;
	uint32_t most = 0;
	size_t i = 0, j;

	if (!by_owner)
		return 0;
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	memcpy(by_owner, table, table_count * sizeof(struct kept_segment *));
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
	qsort(by_owner, table_count, sizeof(struct kept_segment *), holding_order);
	for (; i < table_count; i = j) {
		struct usage u = { 0 };

		for (j = i; j < table_count && by_owner[j]->account_uid == by_owner[i]->account_uid; j++) {
			u.owner_bytes += by_owner[j]->record.size + control_bytes_held(by_owner[j]);
			u.owner_segments++;
		}
		if ((by_bytes ? u.owner_bytes : u.owner_segments) > most_held) {
			most_held = by_bytes ? u.owner_bytes : u.owner_segments;
			most = by_owner[i]->account_uid;
			*its = u;
		}
	}
	free(by_owner);
	return most;
}

/* Whether @account (using @u) keeping @need more bytes for @what (its name)
 * passes the per-uid or the node's budget: the refusal in @rep when it does,
 * naming @who (account_describe()). */
static bool bytes_refused(const char *what, const char *who, uint32_t account, const struct usage *u,
			  uint64_t need, struct mc_keeper_reply *rep)
{
	struct usage held = { 0 };
	uint32_t holder;

	if (conf->uid_budget_bytes &&
	    (need > conf->uid_budget_bytes - u->owner_bytes || u->owner_bytes > conf->uid_budget_bytes)) {
		refuse(rep, ENOSPC, 0,
		       "keeping '%s' (%" PRIu64 " bytes) would hold more than the per-uid limit of %" PRIu64
		       " bytes (--uid-budget): %s holds %" PRIu64
		       " bytes (released ones still mapped included); release a kept segment "
		       "(mooncake-segment keep release NAME) or ask the node's operator to raise --uid-budget",
		       what, need, conf->uid_budget_bytes, who, u->owner_bytes);
		return true;
	}
	if (conf->budget_bytes && (need > conf->budget_bytes - u->bytes || u->bytes > conf->budget_bytes)) {
		holder = largest_holder(true, &held);
		refuse(rep, ENOSPC, 0,
		       "keeping '%s' (%" PRIu64
		       " bytes) would hold more than the keeper's --budget of %" PRIu64 " bytes (%" PRIu64
		       " kept now); uid %u holds the most (%" PRIu64 " bytes), uid %u %" PRIu64
		       " bytes: release a kept segment (mooncake-segment keep release NAME) or ask the node's "
		       "operator to raise --budget or lower --uid-budget",
		       what, need, conf->budget_bytes, u->bytes, (unsigned)holder, held.owner_bytes,
		       (unsigned)account, u->owner_bytes);
		return true;
	}
	return false;
}

/* A fresh control area of @bytes for a new group of @seg, in its oldest
 * group's slot: the group's token, or 0 with the refusal in @rep. */
static uint64_t new_group(struct kept_segment *seg, uint64_t bytes, struct mc_keeper_reply *rep)
{
	struct group_area *g = &seg->groups[seg->groups_next];
	char why[MC_KEEPER_TEXT_MAX + 1];
	struct usage u = usage_of(seg->account_uid);
	uint64_t token = 0, freed = g->token ? g->bytes : 0;
	char who[160];
	int fd, err;

	/* The oldest group's area goes: what it held is not counted any more. */
	account_describe(who, sizeof(who), seg->record.owner_uid, seg->account_uid);
	if (bytes > freed && bytes_refused(seg->record.name, who, seg->account_uid, &u, bytes - freed, rep))
		return 0;
	err = commit_group_area(seg->record.name, bytes, &fd, why, sizeof(why));
	while (!err && !token)
		if (getrandom(&token, sizeof(token), 0) != (ssize_t)sizeof(token)) {
			snprintf(why, sizeof(why), "getrandom: %s", strerror(errno));
			close(fd);
			err = -EAGAIN;
		}
	if (err) {
		refuse(rep, -err, 0, "the keeper cannot make a control area for a group of '%s': %s",
		       seg->record.name, why);
		return 0;
	}
	/* The oldest group's ranks keep what they mapped; only a JOIN to it fails now. */
	if (g->token)
		close(g->fd);
	*g = (struct group_area){ token, fd, bytes, monotonic_ns() };
	seg->groups_next = (seg->groups_next + 1) % MC_KEEPER_GROUPS_PER_SEGMENT;
	return token;
}

/* The reply that hands @seg, with the control area of the group of
 * @group (0: the segment's own, if it keeps one). */
static void reply_pages(const struct kept_segment *seg, uint32_t flags, const struct group_area *group,
			struct mc_keeper_reply *rep, int fds[2])
{
	const struct mc_keeper_segment *r = &seg->record;

	rep->status = 0;
	rep->generation = r->generation;
	rep->size = r->size;
	rep->page_size = r->page_size;
	rep->attach_flags = flags | (seg->hugetlb ? MC_KEEPER_ATTACH_HUGETLB : 0);
	rep->owner_uid = r->owner_uid;
	fds[0] = seg->pages_fd;
	if (group) {
		rep->control_bytes = group->bytes;
		rep->group_token = group->token;
		fds[1] = group->fd;
	} else {
		rep->control_bytes = r->control_bytes;
		fds[1] = seg->control_fd;
	}
	rep->descriptors = fds[1] >= 0 ? 2 : 1;
}

/* A CREATE's reply: with a new group's control area of @group_bytes, not 0. */
static void reply_create(struct kept_segment *seg, uint32_t flags, uint64_t group_bytes,
			 struct mc_keeper_reply *rep, int fds[2])
{
	unsigned int slot = seg->groups_next;

	if (!group_bytes) {
		reply_pages(seg, flags, NULL, rep, fds);
		return;
	}
	if (new_group(seg, group_bytes, rep))
		reply_pages(seg, flags, &seg->groups[slot], rep, fds);
}

/* Whether a group area is held past its forming time: a scan may free it. */
static bool any_group_area_formed(uint64_t now)
{
	size_t i;
	unsigned int g;

	for (i = 0; i < table_count; i++)
		for (g = 0; g < MC_KEEPER_GROUPS_PER_SEGMENT; g++)
			if (table[i]->groups[g].token &&
			    now - table[i]->groups[g].handed_ns >= GROUP_FORMING_NS)
				return true;
	return false;
}

static bool any_released(void)
{
	size_t i;

	for (i = 0; i < table_count; i++)
		if (released(table[i]))
			return true;
	return false;
}

/* Whether @job's count lets @seg go: nobody it can see maps it, and it was
 * not handed to anyone since the scan started (that one may map it now). */
static bool unmapped_at(const struct kept_segment *seg, const struct scan_job *job)
{
	return seg->counted_by == job->serial && !mapped(seg) && seg->last_mapped_ns < job->started_ns;
}

/* What @job's counts let go: released segments whose last mapper went,
 * and, with --idle-timeout, live ones nobody mapped for that long. */
static void free_unmapped(const struct scan_job *job)
{
	uint64_t idle_ns = (uint64_t)conf->idle_timeout_s * 1000000000u, now = monotonic_ns();
	struct kept_segment **gone = calloc(table_count ? table_count : 1, sizeof(struct kept_segment *));
	size_t count = 0, i;

	if (!gone)
		return; /* the next scan looks again */
	for (i = 0; i < table_count; i++) {
		struct kept_segment *seg = table[i];

		if (seg->committing || !unmapped_at(seg, job))
			continue;
		if (released(seg) || (conf->idle_timeout_s && now - seg->last_mapped_ns >= idle_ns))
			gone[count++] = seg;
	}
	for (i = 0; i < count; i++) {
		struct kept_segment *seg = gone[i];

		if (released(seg))
			keeper_log("freed released '%s' of uid %u (generation %" PRIu64
				   "): its last mapper went",
				   seg->record.name, seg->record.owner_uid, seg->record.generation);
		else
			keeper_log("freed '%s' (generation %" PRIu64
				   "): nobody mapped it for %u s (--idle-timeout)",
				   seg->record.name, seg->record.generation, conf->idle_timeout_s);
		remove_at(index_of(seg));
	}
	free(gone);
}

uint64_t store_scan_done(void)
{
	struct scan_job *job = scanner_take_done();

	if (!job)
		return 0;
	scanning = NULL;
	take_counts(job);
	free_unmapped(job);
	free(job->keys);
	free(job);
	if (scan_wanted) {
		const char *why = scan_wanted;

		scan_wanted = NULL;
		start_scan(why);
	}
	/* A scan that could not start counted blind at once: that one too. */
	return scans_done;
}

static int errno_of_commit(int err)
{
	switch (-err) {
	case EMFILE:
	case ENFILE:
		return EMFILE;
	case EINVAL:
	case ENOTSUP:
	case EFBIG:
		return -err;
	default:
		return ENOMEM;
	}
}

/* Take a reservation whose commit failed (or never started) out of the
 * table: nothing of it was stored or saved. */
static void unreserve(struct kept_segment *seg)
{
	size_t index = index_of(seg);

	memmove(&table[index], &table[index + 1], (table_count - index - 1) * sizeof(struct kept_segment *));
	table_count--;
	committing_count--;
	free(seg->declaration);
	free(seg);
}

uint64_t store_commit_done(struct commit_job *job, struct mc_keeper_reply *rep, int fds[2])
{
	struct kept_segment *seg = NULL;
	uint64_t generation;
	char name[48];
	size_t i;
	int err;

	fds[0] = fds[1] = -1;
	rep->type = MC_KEEPER_CREATE | MC_KEEPER_REPLY;
	for (i = 0; i < table_count && !seg; i++)
		if (table[i]->committing == job)
			seg = table[i];
	if (!seg) {
		/* Not reached: a reservation leaves the table only here. */
		keeper_log("a commit of '%s' ended for no reserved segment", job->name);
		if (job->pages.pages_fd >= 0)
			close(job->pages.pages_fd);
		if (job->pages.control_fd >= 0)
			close(job->pages.control_fd);
		free(job);
		refuse(rep, ENOMEM, 0, "the keeper lost its reservation");
		return 0;
	}
	generation = seg->record.generation;
	if (job->err) {
		refuse(rep, errno_of_commit(job->err), 0, "the keeper cannot keep '%s': %s", job->name,
		       job->why);
		keeper_log("cannot keep '%s' for uid %u: %s", job->name, seg->record.owner_uid, job->why);
		unreserve(seg);
		free(job);
		return generation;
	}
	seg->pages_fd = job->pages.pages_fd;
	seg->control_fd = job->pages.control_fd;
	identify(seg);
	seg->committing = NULL;
	committing_count--;
	free(job);
	seg->last_mapped_ns = monotonic_ns();

	fd_name(name, sizeof(name), "pages", generation);
	err = service_store(name, seg->pages_fd);
	if (!err && seg->control_fd >= 0) {
		fd_name(name, sizeof(name), "control", generation);
		err = service_store(name, seg->control_fd);
	}
	if (err)
		keeper_log("cannot store '%s' in the service manager (%s): a restart of the keeper loses it",
			   seg->record.name, strerror(-err));
	if (seg->creator_unseen)
		mark_unseen(seg, seg->creator_pid);
	save();
	keeper_log("kept '%s' (%" PRIu64 " bytes, generation %" PRIu64 ") for uid %u", seg->record.name,
		   seg->record.size, generation, seg->record.owner_uid);
	reply_create(seg, seg->commit_flags, seg->commit_group_bytes, rep, fds);
	return generation;
}

/* Whether keeping @need more bytes for @owner's @req (its new generation
 * going at @index), counted in @account's limits, passes a limit: the
 * refusal in @rep when it does, naming @who (account_describe()).  Released
 * segments still mapped count, until a scan sees them unmapped. */
static bool room_refused(const struct mc_keeper_request *req, uint32_t owner, uint32_t account,
			 const char *who, size_t index, uint64_t need, struct mc_keeper_reply *rep)
{
	struct usage u = usage_of(account), held = { 0 };
	size_t i, released_here = 0;
	uint32_t holder;

	for (i = bound(req->name, owner, false); i < index; i++)
		released_here += released(table[i]);
	/* A LIST page holds one (name, owner) whole: so many generations at most. */
	if (released_here >= MC_KEEPER_LIST_MAX - 1) {
		refuse(rep, EBUSY, 0,
		       "uid %u's '%s' has %zu released generations that processes still map; stop them "
		       "(mooncake-segment keep list shows them) or use another name",
		       (unsigned)owner, req->name, released_here);
		return true;
	}
	if (u.owner_segments >= conf->uid_max_segments) {
		refuse(rep, EMFILE, 0,
		       "%s holds %zu segments (released ones still mapped included); the per-uid limit is "
		       "%u (--uid-max-segments): release one (mooncake-segment keep release NAME) or ask "
		       "the node's operator to raise --uid-max-segments",
		       who, u.owner_segments, conf->uid_max_segments);
		return true;
	}
	if (table_count >= conf->max_segments) {
		holder = largest_holder(false, &held);
		refuse(rep, EMFILE, 0,
		       "the keeper holds %zu segments, its --max-segments; uid %u holds the most (%zu), uid %u "
		       "%zu; the per-uid limit is %u (--uid-max-segments): ask the node's operator to raise "
		       "--max-segments or lower --uid-max-segments",
		       table_count, (unsigned)holder, held.owner_segments, (unsigned)account,
		       u.owner_segments, conf->uid_max_segments);
		return true;
	}
	return bytes_refused(req->name, who, account, &u, need, rep);
}

/* A new kept segment for @req, owned by the uid it names: the caller's, or
 * for a replace by root the replaced segment's owner; counted in @account's
 * limits (the caller's account, or the replaced segment's). */
static struct store_wait create_new(const struct mc_keeper_request *req, const struct keeper_peer *peer,
				    uint32_t account, uint64_t page_size, uint32_t flags,
				    struct mc_keeper_reply *rep)
{
	const struct store_wait answered = { 0, false, 0 };
	bool hugetlb = (req->flags & MC_KEEPER_CREATE_HUGETLB) != 0;
	uint32_t owner = owner_of(req, peer);
	size_t index = bound(req->name, owner, true);
	uint64_t alloc_size, need;
	struct commit_job *job;
	struct kept_segment *seg;
	struct timespec now;
	char why[MC_KEEPER_TEXT_MAX + 1], who[160];
	int err;

	/* The control area is the library's small shared header (readiness,
	 * slots); a huge one would be memory outside the room check. */
	if (kept_control_bytes(req) > CONTROL_MAX) {
		refuse(rep, EINVAL, 0,
		       "a control area of %" PRIu64
		       " bytes is more than the keeper keeps (%llu); ask for less",
		       kept_control_bytes(req), (unsigned long long)CONTROL_MAX);
		return answered;
	}
	if (req->size > UINT64_MAX - page_size) {
		refuse(rep, EINVAL, 0, "size %" PRIu64 " is too large", req->size);
		return answered;
	}
	alloc_size = (req->size + page_size - 1) / page_size * page_size;
	/* Its control area, its own or (made once committed) its group's. */
	need = alloc_size + kept_control_bytes(req) + group_control_bytes(req);
	if (need < alloc_size) {
		refuse(rep, EINVAL, 0, "size %" PRIu64 " is too large", req->size);
		return answered;
	}
	account_describe(who, sizeof(who), owner, account);
	if (room_refused(req, owner, account, who, index, need, rep)) {
		/* Released segments whose last mapper went are freed before any
		 * refusal: a scan since this request came frees them. */
		if ((any_released() || any_group_area_formed(monotonic_ns())) && scans_done < ticket)
			return wait_for_scan("a create's room check");
		return answered;
	}
	/* Reserved now, in the table: counted by the budget and the limits
	 * before the next request is read, so that two creates committing at
	 * once cannot together pass them. */
	job = calloc(1, sizeof(*job));
	seg = calloc(1, sizeof(*seg));
	if (!job || !seg || insert_at(index, seg) != 0) {
		free(job);
		free(seg);
		refuse(rep, ENOMEM, 0, "the keeper is out of memory for its table");
		return answered;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	memcpy(seg->record.name, req->name, sizeof(seg->record.name));
	seg->record.fingerprint = req->fingerprint;
	seg->record.size = alloc_size;
	seg->record.page_size = page_size;
	seg->record.control_bytes = kept_control_bytes(req);
	seg->record.generation = next_generation++;
	seg->record.created = (uint64_t)now.tv_sec;
	seg->record.world_size = req->world_size;
	seg->record.owner_uid = owner;
	seg->account_uid = account;
	seg->record.gid = req->gid;
	seg->record.sharing = req->sharing;
	seg->record.flags = hugetlb ? MC_KEEPER_SEGMENT_HUGETLB : 0;
	seg->record.identity_bytes = req->identity_bytes;
	memcpy(seg->record.identity, req->identity, req->identity_bytes);
	/* Only for naming what differs later: without memory, today's fingerprint text. */
	seg->declaration = declaration_copy(req);
	seg->pages_fd = seg->control_fd = -1;
	seg->hugetlb = hugetlb;
	seg->last_mapped_ns = monotonic_ns();
	seg->committing = job;
	seg->commit_flags = flags;
	/* A group's control area is not the segment's: made once it is kept. */
	seg->commit_group_bytes = group_control_bytes(req);
	seg->creator_unseen = !peer_visible(peer);
	seg->creator_pid = peer->pid;
	committing_count++;

	memcpy(job->name, req->name, sizeof(job->name));
	job->alloc_size = alloc_size;
	job->page_size = page_size;
	job->control_bytes = kept_control_bytes(req);
	job->hugetlb = hugetlb;
	job->account_uid = account;
	err = committer_submit(job, why, sizeof(why));
	if (err) {
		unreserve(seg);
		free(job);
		refuse(rep, -err, 0, "the keeper cannot keep '%s': %s", req->name, why);
		return answered;
	}
	keeper_debug("committing '%s' (%" PRIu64 " bytes, generation %" PRIu64 ") for uid %u on a thread",
		     req->name, alloc_size, seg->record.generation, (unsigned)owner);
	return (struct store_wait){ seg->record.generation, true, 0 };
}

static struct store_wait handle_create(const struct mc_keeper_request *req, const struct keeper_peer *peer,
				       bool behind_commit, struct mc_keeper_reply *rep, int fds[2])
{
	const struct store_wait answered = { 0, false, 0 };
	bool hugetlb = (req->flags & MC_KEEPER_CREATE_HUGETLB) != 0, found;
	char why[MC_KEEPER_TEXT_MAX + 1];
	uint32_t owner = owner_of(req, peer);
	size_t index = find(req->name, owner, &found);
	struct kept_segment *seg;
	uint64_t page_size, generation;
	uint32_t account;
	int err;

	err = commit_page_size(req->page_size, hugetlb, &page_size, why, sizeof(why));
	if (err) {
		refuse(rep, -err, 0, "%s", why);
		return answered;
	}
	if (!found) {
		/* Nobody, root included, creates a segment another uid owns. */
		if (owner != (uint32_t)peer->uid) {
			refuse(rep, ENOENT, 0,
			       "uid %u keeps no segment '%s'; only uid %u can create it (leave the owner out to "
			       "use your own)",
			       (unsigned)owner, req->name, (unsigned)owner);
			return answered;
		}
		if (req->flags & MC_KEEPER_CREATE_ATTACH_ONLY) {
			refuse(rep, ENOENT, 0, "no kept segment '%s' (attach only); create it first",
			       req->name);
			return answered;
		}
		return create_new(req, peer, peer->account, page_size, 0, rep);
	}
	seg = table[index];
	if (!may_attach(seg, peer, rep))
		return answered;
	if (seg->committing) {
		/* Answered once its pages are there (or its commit failed). */
		keeper_debug("a CREATE of '%s' by uid %u waits for its commit (generation %" PRIu64 ")",
			     req->name, (unsigned)peer->uid, seg->record.generation);
		return (struct store_wait){ seg->record.generation, false, 0 };
	}
	if (req->flags & MC_KEEPER_CREATE_CREATE_ONLY) {
		refuse(rep, EEXIST, 0,
		       "'%s' is already kept (generation %" PRIu64 "); create only refuses it", req->name,
		       seg->record.generation);
		return answered;
	}
	if (declaration_compare(seg, req, page_size, rep) == MC_KEEPER_FIELD_NONE) {
		bool learned = false, was_unseen = seg->handed_unseen;

		/* One kept from a state without declarations learns its own. */
		if (!seg->declaration) {
			seg->declaration = declaration_copy(req);
			learned = seg->declaration != NULL;
		}
		/* Behind its commit, nobody wrote the pages yet: not warm. */
		if (!behind_commit)
			seg->record.warm_attaches++;
		seg->last_mapped_ns = monotonic_ns();
		note_peer(seg, peer);
		/* Only the count changed: it may wait (issue 38 item 8). */
		if (learned || seg->handed_unseen != was_unseen)
			save();
		else
			save_soon();
		keeper_log("attached uid %u to '%s' (generation %" PRIu64 ", %s)", (unsigned)peer->uid,
			   req->name, seg->record.generation,
			   behind_commit ? "cold, behind its create" : "warm");
		reply_create(seg, behind_commit ? 0 : MC_KEEPER_ATTACH_WARM, group_control_bytes(req), rep,
			     fds);
		return answered;
	}
	if (!(req->flags & MC_KEEPER_CREATE_REPLACE))
		return answered; /* refused with EEXIST and the field */
	/* Replace: the old declaration goes only when nobody maps it. */
	memset(rep->text, 0, sizeof(rep->text));
	rep->status = 0;
	rep->field = 0;
	if (!may_free(seg, peer, rep, "replace"))
		return answered;
	if (!counted_since_asked(seg))
		return wait_for_scan("a replace");
	if (mapped(seg)) {
		refuse(rep, EBUSY, 0,
		       "'%s' cannot be replaced: %u process(es) map it; stop them first, or use another name",
		       req->name, seg->mappers_seen);
		return answered;
	}
	generation = seg->record.generation;
	/* Root replacing another's segment: counted where the old one was. */
	account = owner == (uint32_t)peer->uid ? (uint32_t)peer->account : seg->account_uid;
	remove_at(index);
	keeper_log("replaced '%s' (generation %" PRIu64 ") for uid %u: a new declaration", req->name,
		   generation, (unsigned)peer->uid);
	return create_new(req, peer, account, page_size, MC_KEEPER_ATTACH_REPLACED, rep);
}

/* A rank that cannot reach its group's owner: the pages of the generation
 * the owner took and the control area the keeper made for that group. */
static void handle_join(const struct mc_keeper_request *req, const struct keeper_peer *peer,
			struct mc_keeper_reply *rep, int fds[2])
{
	size_t first = bound(req->name, req->owner_uid, false), end = bound(req->name, req->owner_uid, true);
	struct kept_segment *seg = NULL;
	struct group_area *group = NULL;

	if (first == end) {
		refuse(rep, ENOENT, 0, "uid %u keeps no segment '%s'", (unsigned)req->owner_uid, req->name);
		return;
	}
	for (size_t i = first; i < end && !seg; i++)
		if (table[i]->record.generation == req->generation)
			seg = table[i];
	if (!seg) {
		const struct kept_segment *now = table[end - 1];

		if (may_attach(now, peer, rep))
			refuse(rep, ESTALE, 0,
			       "uid %u's '%s' is at generation %" PRIu64
			       " now, the group's owner took %" PRIu64
			       ": it was released or replaced since; form the group again",
			       (unsigned)req->owner_uid, req->name, now->record.generation, req->generation);
		return;
	}
	if (!may_attach(seg, peer, rep))
		return;
	if (seg->committing) {
		refuse(rep, EBUSY, 0, "'%s' (generation %" PRIu64 ") is still being committed; ask again",
		       req->name, req->generation);
		return;
	}
	for (unsigned int i = 0; i < MC_KEEPER_GROUPS_PER_SEGMENT && !group; i++)
		if (seg->groups[i].token == req->token)
			group = &seg->groups[i];
	if (!group) {
		refuse(rep, ESTALE, 0,
		       "'%s' (generation %" PRIu64 ") has no group control area with token %016" PRIx64
		       ": the keeper restarted since the group's owner created it, or more than %d groups "
		       "were formed since; form the group again",
		       req->name, req->generation, req->token, MC_KEEPER_GROUPS_PER_SEGMENT);
		return;
	}
	seg->last_mapped_ns = group->handed_ns = monotonic_ns();
	note_peer(seg, peer);
	keeper_log("joined uid %u to '%s' (generation %" PRIu64 ") for a rank that cannot reach its owner",
		   (unsigned)peer->uid, req->name, req->generation);
	reply_pages(seg, 0, group, rep, fds);
}

/* Another uid's live @name that @peer may see, for a refusal to point at:
 * root releasing "kv" means uid 1002's "kv" more often than its own. */
static const struct kept_segment *same_name_elsewhere(const char *name, uint32_t owner,
						      const struct keeper_peer *peer)
{
	size_t i;

	for (i = bound(name, 0, false); i < table_count && !strcmp(table[i]->record.name, name); i++)
		if (table[i]->record.owner_uid != owner && !released(table[i]) &&
		    may_attach(table[i], peer, NULL))
			return table[i];
	return NULL;
}

/* @owner's @name, or NULL with ENOENT in @rep (naming another owner's
 * segment of that name that @peer may see, with the option that reaches it). */
static struct kept_segment *lookup(const char *name, uint32_t owner, const struct keeper_peer *peer,
				   size_t *index, struct mc_keeper_reply *rep)
{
	const struct kept_segment *other;
	bool found;

	*index = find(name, owner, &found);
	if (found)
		return table[*index];
	other = same_name_elsewhere(name, owner, peer);
	if (other)
		refuse(rep, ENOENT, 0,
		       "uid %u keeps no segment '%s', uid %u does: name its owner (--owner %u)",
		       (unsigned)owner, name, (unsigned)other->record.owner_uid,
		       (unsigned)other->record.owner_uid);
	else
		refuse(rep, ENOENT, 0,
		       "uid %u keeps no segment '%s'; mooncake-segment keep list shows what you may see",
		       (unsigned)owner, name);
	return NULL;
}

static struct store_wait handle_stat(const struct mc_keeper_request *req, const struct keeper_peer *peer,
				     struct mc_keeper_reply *rep)
{
	const struct store_wait answered = { 0, false, 0 };
	size_t index;

	if (!lookup(req->name, owner_of(req, peer), peer, &index, rep))
		return answered;
	if (!may_attach(table[index], peer, rep))
		return answered;
	if (table[index]->committing) {
		refuse(rep, EBUSY, 0,
		       "'%s' of uid %u is being committed (its create is under way); ask again once it is "
		       "answered",
		       req->name, table[index]->record.owner_uid);
		return answered;
	}
	if (!counted_recently(table[index]))
		return wait_for_scan("STAT");
	rep->segments[0] = reported(table[index]);
	rep->count = 1;
	return answered;
}

static struct store_wait handle_list(const struct mc_keeper_request *req, const struct keeper_peer *peer,
				     struct mc_keeper_reply *rep)
{
	const struct store_wait answered = { 0, false, 0 };
	struct kept_segment *page[MC_KEEPER_LIST_MAX] = { NULL };
	size_t index, taken = 0, i;

	/* The records after the cursor: (name, owner uid), or all of a name. */
	if (req->owner_given)
		index = bound(req->name, req->owner_uid, true);
	else
		index = req->name[0] ? after_name(req->name) : 0;
	for (; index < table_count; index++) {
		/* Not kept until its commit is done. */
		if (table[index]->committing || !may_attach(table[index], peer, NULL))
			continue;
		if (taken == MC_KEEPER_LIST_MAX) {
			rep->list_flags = MC_KEEPER_LIST_MORE;
			/* Never split one (name, owner): the cursor passes it whole. */
			while (taken > 1 && !key_cmp(table[index]->record.name,
						     table[index]->record.owner_uid, page[taken - 1]))
				taken--;
			break;
		}
		page[taken++] = table[index];
	}
	for (i = 0; i < taken; i++)
		if (!counted_recently(page[i]))
			return wait_for_scan("LIST");
	for (i = 0; i < taken; i++)
		rep->segments[i] = reported(page[i]);
	rep->count = (uint16_t)taken;
	return answered;
}

static struct store_wait handle_release(const struct mc_keeper_request *req, const struct keeper_peer *peer,
					struct mc_keeper_reply *rep)
{
	const struct store_wait answered = { 0, false, 0 };
	bool in_use;
	size_t index;
	struct kept_segment *seg = lookup(req->name, owner_of(req, peer), peer, &index, rep);

	if (!seg)
		return answered;
	if (!may_free(seg, peer, rep, "release"))
		return answered;
	if (seg->committing) {
		refuse(rep, EBUSY, 0,
		       "'%s' is being committed (its create is under way); release it once that create is "
		       "answered",
		       req->name);
		return answered;
	}
	if (!counted_since_asked(seg))
		return wait_for_scan("a release");
	in_use = mapped(seg);
	rep->generation = seg->record.generation;
	rep->release_flags = in_use ? MC_KEEPER_RELEASE_DEFERRED : MC_KEEPER_RELEASE_FREED;
	if (seg->mappers_seen)
		snprintf(rep->text, sizeof(rep->text), "'%s' is freed when its %u mapper(s) unmap it",
			 req->name, seg->mappers_seen);
	else if (in_use)
		snprintf(rep->text, sizeof(rep->text),
			 "'%s' went to processes the keeper cannot see (another PID namespace): the kernel "
			 "frees it when they unmap it, uncounted by the keeper from now on",
			 req->name);
	keeper_log("released '%s' (generation %" PRIu64 ") for uid %u: %s", req->name, seg->record.generation,
		   (unsigned)peer->uid, in_use ? "freed with its last mapping" : "freed");
	/* The keeper's reference goes unless a mapper it can see will tell it
	 * when the pages go: unseen ones never will. */
	if (!seg->mappers_seen) {
		remove_at(index);
		return answered;
	}
	/* Still mapped: its pages still count, until a scan sees them unmapped. */
	seg->record.flags |= MC_KEEPER_SEGMENT_RELEASED;
	save();
	return answered;
}

static struct store_wait dispatch(const struct mc_keeper_request *req, const struct keeper_peer *peer,
				  bool behind_commit, struct mc_keeper_reply *rep, int fds[2])
{
	fds[0] = fds[1] = -1;
	rep->type = (uint16_t)(req->type | MC_KEEPER_REPLY);
	rep->sequence = req->sequence;
	switch (req->type) {
	case MC_KEEPER_CREATE:
		return handle_create(req, peer, behind_commit, rep, fds);
	case MC_KEEPER_LIST:
		return handle_list(req, peer, rep);
	case MC_KEEPER_STAT:
		return handle_stat(req, peer, rep);
	case MC_KEEPER_RELEASE:
		return handle_release(req, peer, rep);
	case MC_KEEPER_JOIN:
		handle_join(req, peer, rep, fds);
		break;
	default:
		refuse(rep, EPROTO, 0, "keeper request: type %u is not served here", (unsigned)req->type);
		break;
	}
	return (struct store_wait){ 0, false, 0 };
}

/* dispatch() with the request's ticket; a scan that could not start has
 * counted blind at once, and the request goes on with that count. */
static struct store_wait handle(const struct mc_keeper_request *req, const struct keeper_peer *peer,
				bool behind_commit, struct mc_keeper_reply *rep, int fds[2])
{
	struct store_wait wait;

	for (;;) {
		wait = dispatch(req, peer, behind_commit, rep, fds);
		if (!wait.scan || wait.scan > scans_done)
			return wait;
		ticket = wait.scan;
		memset(rep, 0, sizeof(*rep));
	}
}

struct store_wait store_handle(const struct mc_keeper_request *req, const struct keeper_peer *peer,
			       bool behind_commit, struct mc_keeper_reply *rep, int fds[2])
{
	ticket = scans_started + 1;
	return handle(req, peer, behind_commit, rep, fds);
}

struct store_wait store_handle_after_scan(const struct mc_keeper_request *req, const struct keeper_peer *peer,
					  uint64_t scan, struct mc_keeper_reply *rep, int fds[2])
{
	ticket = scan;
	return handle(req, peer, false, rep, fds);
}

/* Which scan the table asks for by itself: released segments still mapped
 * each second, so that the budget gets their bytes back soon after their
 * last mapper goes; with --idle-timeout, live ones due.  Frees nothing
 * itself: the scan's end does (free_unmapped).  How long the loop may
 * sleep before the next look, -1 forever. */
/* The sooner of two poll timeouts in ms, -1 being never. */
static int sooner(int a, int b)
{
	return a < 0 || (b >= 0 && b < a) ? b : a;
}

int store_tick(void)
{
	uint64_t now = monotonic_ns(), idle_ns = (uint64_t)conf->idle_timeout_s * 1000000000u;
	int released_ms = -1, groups_ms = -1, idle_ms;
	static uint64_t swept_ns, groups_swept_ns;
	bool due = false;
	size_t i;

	/* Groups that exited leave areas nobody maps: a scan a minute finds
	 * them (a create refused for room scans at once). */
	if (any_group_area_formed(now)) {
		if (now - groups_swept_ns >= GROUP_SWEEP_NS && !scanning) {
			groups_swept_ns = now;
			want_scan("the group area sweep");
		}
		groups_ms = (int)((GROUP_SWEEP_NS - (now - groups_swept_ns) % GROUP_SWEEP_NS) / 1000000u) + 1;
	}
	if (any_released()) {
		/* The loop ticks after every request: once a second, not each time. */
		if (now - swept_ns >= 1000000000u && !scanning) {
			swept_ns = now;
			want_scan("the released sweep");
		}
		released_ms = (int)((1000000000u - (now - swept_ns) % 1000000000u) / 1000000u) + 1;
	}
	released_ms = sooner(released_ms, groups_ms);
	if (save_owed && now >= save_due_ns)
		save();
	if (save_owed)
		released_ms = sooner(released_ms, (int)((save_due_ns - now) / 1000000u) + 1);
	if (!conf->idle_timeout_s)
		return released_ms;
	for (i = 0; i < table_count && !due; i++)
		due = !released(table[i]) && !table[i]->committing &&
		      now - table[i]->last_mapped_ns >= idle_ns;
	if (due && !scanning)
		want_scan("the idle timeout");
	/* Look again within a quarter of the timeout, at most every 30 s. */
	idle_ms = conf->idle_timeout_s >= 120 ? 30000 : (int)(conf->idle_timeout_s * 250u);
	return sooner(released_ms, idle_ms);
}

int store_start(const struct keeper_config *config)
{
	struct kept_segment *loaded = NULL;
	size_t count = 0, i;
	int err;

	conf = config;
	err = state_load(&loaded, &count, &next_generation);
	if (err) {
		keeper_log("cannot read the saved table (%s): starting empty", strerror(-err));
		count = 0;
	}
	if (next_generation == 0)
		next_generation = 1;
	for (i = 0; i < count; i++) {
		struct kept_segment *seg = malloc(sizeof(*seg));
		bool found;
		size_t index;

		if (!seg) {
			for (; i < count; i++)
				free(loaded[i].declaration);
			break;
		}
		/* state_load() took its descriptors from the store and checked them. */
		*seg = loaded[i];
		seg->last_mapped_ns = monotonic_ns();
		if (seg->record.generation >= next_generation)
			next_generation = seg->record.generation + 1;
		/* A released one goes before the live one of its key (generation order). */
		(void)find(seg->record.name, seg->record.owner_uid, &found);
		index = bound(seg->record.name, seg->record.owner_uid, true);
		if (seg->pages_fd < 0 || (seg->record.control_bytes && seg->control_fd < 0) ||
		    (found && !released(seg)) || insert_at(index, seg) != 0) {
			keeper_log("lost '%s' (generation %" PRIu64
				   "): its descriptors were not stored, or it is twice in the state",
				   seg->record.name, seg->record.generation);
			free_segment(seg);
			continue;
		}
		identify(seg);
		keeper_log("kept '%s' (%" PRIu64 " bytes, generation %" PRIu64
			   ") for uid %u, from before the restart",
			   seg->record.name, seg->record.size, seg->record.generation, seg->record.owner_uid);
	}
	free(loaded);
	return 0;
}

void store_flush(void)
{
	if (save_owed)
		save();
}

void store_stop(void)
{
	size_t i;

	store_flush();
	/* Not free_segment(): the descriptor store keeps them for the next keeper. */
	for (i = 0; i < table_count; i++) {
		/* A committing one's job is its committer's (committer_stop()). */
		if (table[i]->pages_fd >= 0)
			close(table[i]->pages_fd);
		if (table[i]->control_fd >= 0)
			close(table[i]->control_fd);
		free(table[i]->declaration);
		free(table[i]);
	}
	committing_count = 0;
	free(table);
	table = NULL;
	table_count = table_room = 0;
}
