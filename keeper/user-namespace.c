/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who the keeper cannot tell apart (keeper.h): run in a user namespace
 * (`unshare -U -r`, systemd's PrivateUsers=yes), the keeper sees every uid
 * and gid outside its namespace's maps as the one overflow id (65534 by
 * default, /proc/sys/kernel/overflowuid and overflowgid).  Served as such,
 * two unmapped users would be one identity: one would list, attach to and
 * release the other's segments.  So a client the keeper sees as an overflow
 * id is refused, by name.  In the initial user namespace every id is the
 * host's own and the overflow ids are ordinary users (nobody, nogroup).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keeper.h"

static bool in_user_namespace; /* not the initial one: unmapped ids are the overflow ids */
static unsigned long overflow_uid = 65534, overflow_gid = 65534;

/* The initial user namespace maps all 2^32 - 1 ids onto themselves. */
static bool initial_map(const char *path)
{
	unsigned long inside, outside, count;
	FILE *f = fopen(path, "re");
	bool initial = false;

	if (!f)
		return true; /* no user namespaces in this kernel: the host's ids */
	initial = fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 && outside == 0 &&
		  count == 4294967295UL && fscanf(f, "%lu", &inside) != 1;
	fclose(f);
	return initial;
}

static void read_overflow(const char *path, unsigned long *id)
{
	FILE *f = fopen(path, "re");

	if (f) {
		if (fscanf(f, "%lu", id) != 1)
			*id = 65534;
		fclose(f);
	}
}

void user_namespace_start(void)
{
	in_user_namespace = !initial_map("/proc/self/uid_map") || !initial_map("/proc/self/gid_map");
	if (!in_user_namespace)
		return;
	read_overflow("/proc/sys/kernel/overflowuid", &overflow_uid);
	read_overflow("/proc/sys/kernel/overflowgid", &overflow_gid);
	keeper_say(KEEPER_LOG_NOTICE,
		   "running in a user namespace: clients whose uid or gid it does not map (seen as %lu or "
		   "%lu) are refused, as they cannot be told apart; map every client's ids "
		   "(doc/keeper.md, \"Who may do what\")",
		   overflow_uid, overflow_gid);
}

bool user_namespace_unmapped_gid(gid_t gid)
{
	return in_user_namespace && (unsigned long)gid == overflow_gid;
}

bool user_namespace_unmapped(uid_t uid, gid_t gid)
{
	return (in_user_namespace && (unsigned long)uid == overflow_uid) || user_namespace_unmapped_gid(gid);
}
