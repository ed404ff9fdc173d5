/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node keeper's view of the kept segments a scan found (segments.h):
 * one connection, HELLO for the keeper's pid, LIST page by page, and each
 * record joined to the segment whose memfd is the record's (device, inode):
 * the file the keeper holds, exactly, whoever scans and whatever keeper
 * made it.  (Not the "owner=PID" in the memfd's name: that names the keeper
 * that created it, and a keeper restarted through the descriptor store has
 * another pid.)  The record's name must also be the segment's label, a
 * check that costs nothing.  Two records that fit one segment, or one
 * record that fits two segments, join nothing: the list never shows one
 * user's figures under another's segment.  Quiet by design: list must work,
 * and fast, with no keeper at all.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "route/keeper-client.h"
#include "route/keeper-wire.h"
#include "segments.h"

/* The keeper answers at once or not at all, as far as list is concerned. */
#define ASK_TIMEOUT_MS 1000

/* The memfd's label holds the name cut to what its name has room for (96
 * bytes) and up to a '|': it must begin the record's name. */
static bool fits(const struct segment *s, const struct mc_keeper_segment *r)
{
	const char *label_name = s->label + strlen(KEPT_LABEL_PREFIX);

	return s->kept && r->ino && s->ino == r->ino && s->dev_major == r->dev_major &&
	       s->dev_minor == r->dev_minor && !strncmp(label_name, r->name, strlen(label_name));
}

static void join(struct segment_scan *scan, const struct mc_keeper_segment *r, bool *ambiguous)
{
	unsigned int fitting = 0;

	for (unsigned int i = 0; i < scan->nsegs; i++)
		fitting += fits(&scan->segs[i], r);
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		struct segment *s = &scan->segs[i];

		if (!fits(s, r))
			continue;
		/* One file is one segment of the scan and one record of the
		 * keeper; anything else is not known to be whose, so none is
		 * shown. */
		if (s->has_keeper || fitting > 1)
			ambiguous[i] = true;
		s->has_keeper = true;
		s->keeper = (struct keeper_record){
			.generation = r->generation,
			.created = r->created,
			.warm_attaches = r->warm_attaches,
			.uid = r->owner_uid,
			.sharing = r->sharing,
			.released = (r->flags & MC_KEEPER_SEGMENT_RELEASED) != 0,
		};
	}
}

/* A kept segment's owner is the keeper that holds it now: the process of
 * the scan that holds its descriptor with the pid HELLO gave (in its own
 * namespace), or none where the scan cannot see it (another user's
 * process).  Never the process the name's old pid has gone to since. */
static void own(struct segment *s, uint32_t keeper_pid)
{
	if (s->owner >= 0)
		s->procs[s->owner].owner = false;
	s->owner = -1;
	for (unsigned int j = 0; j < s->nprocs && s->owner < 0; j++)
		if (s->procs[j].holds_descriptor && s->procs[j].pid_ns_pid == keeper_pid)
			s->owner = (int)j;
	if (s->owner >= 0)
		s->procs[s->owner].owner = true;
}

void segments_join_keeper(struct segment_scan *scan, const char *socket)
{
	struct mc_keeper_request req = { .type = MC_KEEPER_HELLO };
	struct mc_keeper_reply *rep;
	struct mc_keeper_conn conn;
	bool *ambiguous;
	uint32_t keeper_pid = 0;
	int fds[2];

	if (!scan->kept)
		return;
	scan->keeper_asked = true;
	rep = malloc(sizeof(*rep));
	ambiguous = calloc(scan->nsegs, sizeof(*ambiguous));
	if (!rep || !ambiguous || mc_keeper_open(&conn, socket, ASK_TIMEOUT_MS) != 0)
		goto out;
	if (mc_keeper_exchange(&conn, &req, rep, fds, ASK_TIMEOUT_MS) != 0 || rep->status)
		goto close;
	keeper_pid = rep->keeper_pid;
	memset(&req, 0, sizeof(req));
	req.type = MC_KEEPER_LIST;
	do {
		if (mc_keeper_exchange(&conn, &req, rep, fds, ASK_TIMEOUT_MS) != 0 || rep->status)
			goto close;
		for (unsigned int i = 0; i < rep->count; i++)
			join(scan, &rep->segments[i], ambiguous);
	} while (mc_keeper_list_advance(&req, rep));
	scan->keeper_answered = true;
close:
	/* A keeper that stopped answering half way joins nothing. */
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		if (ambiguous[i] || !scan->keeper_answered)
			scan->segs[i].has_keeper = false;
		if (scan->segs[i].has_keeper)
			own(&scan->segs[i], keeper_pid);
	}
	mc_keeper_close(&conn);
out:
	free(ambiguous);
	free(rep);
}
