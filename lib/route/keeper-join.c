/* SPDX-License-Identifier: Apache-2.0 */
/*
 * JOIN, and the tracked exchange (keeper-join.h).  A JOIN is only tried
 * when every route to the owner failed: the routes need no keeper and no
 * access to its socket, and reach any segment.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/little-endian.h"
#include "base/tracked-fd.h"
#include "keeper-join.h"

#define REF_MARKER UINT32_C(0x4A4B434D) /* bytes "MCKJ" */
/* A JOIN answers at once (no commit): as long as a connect may take. */
#define JOIN_TIMEOUT_MS 10000

uint16_t mc_keeper_ref_encode(const struct mc_keeper_ref *k, uint8_t *out, size_t room)
{
	if (room < MC_KEEPER_REF_BYTES)
		return 0;
	mc_put_le32(out, REF_MARKER);
	mc_put_le32(out + 4, k->owner_uid);
	mc_put_le64(out + 8, k->token);
	return MC_KEEPER_REF_BYTES;
}

bool mc_keeper_ref_decode(const uint8_t *in, size_t len, struct mc_keeper_ref *k)
{
	if (len != MC_KEEPER_REF_BYTES || mc_get_le32(in) != REF_MARKER || !mc_get_le64(in + 8))
		return false;
	k->owner_uid = mc_get_le32(in + 4);
	k->token = mc_get_le64(in + 8);
	return true;
}

int mc_keeper_exchange_tracked(struct mc_keeper_conn *conn, struct mc_keeper_request *req,
			       struct mc_keeper_reply *rep, int fds[2], struct mc_tracked_fd tracking[2],
			       int timeout_ms)
{
	struct mc_tracked_fd conn_tracking;
	int err;

	fds[0] = fds[1] = -1;
	mc_fd_track_begin();
	mc_fd_track_held(&conn_tracking, &conn->fd);
	mc_fd_track_pause();
	err = mc_keeper_send(conn, req, timeout_ms);
	if (!err)
		err = mc_keeper_wait_reply(conn, req, timeout_ms);
	mc_fd_track_resume();
	if (!err)
		err = mc_keeper_receive(conn, req, rep, fds);
	mc_fd_untrack_held(&conn_tracking); /* under the registry: the caller closes it */
	tracking[1] = (struct mc_tracked_fd){ NULL, NULL };
	if (fds[1] >= 0)
		mc_fd_track_held(&tracking[1], &fds[1]);
	mc_fd_track_end(&tracking[0], &fds[0]);
	return err;
}

/* The keeper's refusal, for the peer's message. */
static int refused(const struct mc_keeper_ref *k, const char *path, const struct mc_keeper_reply *rep)
{
	int err = rep->status == EACCES || rep->status == EPERM	   ? EACCES
		  : rep->status == ENOENT || rep->status == ESTALE ? ENOENT
								   : EIO;

	return mc_error(err, "the node keeper at %s refused to hand kept segment '%s' of uid %u (%s): %s",
			path, k->name, (unsigned)k->owner_uid, strerror((int)rep->status), rep->text);
}

/* The keeper answered for the segment, generation and group asked for. */
static int check_answer(const struct mc_keeper_ref *k, const char *path, const struct mc_keeper_reply *rep)
{
	if (rep->generation != k->generation || rep->owner_uid != k->owner_uid ||
	    rep->group_token != k->token || rep->descriptors != 2)
		return mc_error(
			EPROTO,
			"the node keeper at %s answered JOIN of kept segment '%s' with uid %u's "
			"generation %llu (group %016llx), not uid %u's generation %llu (group %016llx)",
			path, k->name, (unsigned)rep->owner_uid, (unsigned long long)rep->generation,
			(unsigned long long)rep->group_token, (unsigned)k->owner_uid,
			(unsigned long long)k->generation, (unsigned long long)k->token);
	return 0;
}

int mc_keeper_join(const struct mc_keeper_ref *k, int fds[2], struct mc_tracked_fd tracking[2])
{
	struct mc_keeper_request req = { .type = MC_KEEPER_JOIN };
	struct mc_keeper_reply *rep = malloc(sizeof(*rep));
	struct mc_keeper_conn conn;
	int err;

	fds[0] = fds[1] = -1;
	memset(tracking, 0, 2 * sizeof(*tracking));
	if (!rep)
		return mc_error(ENOMEM, "out of memory");
	snprintf(req.name, sizeof(req.name), "%s", k->name);
	req.owner_given = true;
	req.owner_uid = k->owner_uid;
	req.generation = k->generation;
	req.token = k->token;
	err = mc_keeper_open(&conn, NULL, JOIN_TIMEOUT_MS);
	if (!err) {
		err = mc_keeper_exchange_tracked(&conn, &req, rep, fds, tracking, JOIN_TIMEOUT_MS);
		if (!err && rep->status)
			err = refused(k, conn.path, rep);
		if (!err)
			err = check_answer(k, conn.path, rep);
		mc_keeper_close(&conn);
	}
	if (err) {
		mc_fd_close(&tracking[0]);
		mc_fd_close(&tracking[1]);
	}
	free(rep);
	return err;
}
