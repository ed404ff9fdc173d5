/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's client (route/keeper-client.c) against a keeper that lies:
 * a fake keeper thread on a real filesystem SOCK_SEQPACKET socket answers
 * one request the way a test asks (right, with another sequence, with
 * descriptors it does not announce, or not at all), and the client must
 * take what is right, refuse the rest with -EPROTO and leak no descriptor.
 * Also: no keeper at the path, a path too long, and a socket served by
 * another user (as root only: it needs a second uid).  And create() of a
 * kept segment against a keeper that hands pages it must not trust
 * (unsealed, short, write-sealed, another uid's, other pages): refused,
 * nothing mapped or left open.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "mooncake/segment.h"
#include "route/keeper-client.h"
#include "route/keeper-join.h"
#include "route/keeper-wire.h"

enum fake_mode {
	ANSWER_RIGHT,		/* the reply of the request's type, its descriptors as announced */
	ANSWER_OTHER_SEQUENCE,	/* a reply to another request */
	ANSWER_REFUSAL_WITH_FD, /* a STAT refused with ENOENT, yet a descriptor attached */
	ANSWER_ONE_OF_TWO,	/* a CREATE that announces two descriptors and sends one */
	ANSWER_FIVE,		/* a CREATE that announces two descriptors and sends five */
	ANSWER_NEVER,		/* reads the request and says nothing until the client goes */
	/* A CREATE from the library's create(): the pages it asked for, ... */
	KEPT_RIGHT,	      /* sealed against shrinking and growing, warm */
	KEPT_UNSEALED,	      /* ... with no seal */
	KEPT_SHORT,	      /* ... a page short */
	KEPT_WRITE_SEALED,    /* ... sealed against writing too */
	KEPT_OTHER_UID,	      /* ... owned by another uid */
	KEPT_OTHER_PAGE_SIZE, /* ... announced in pages of another size */
	KEPT_NO_GROUP,	      /* ... without the group's control area (an older keeper) */
	KEPT_GROUP_WRITTEN,   /* ... with a control area another group wrote */
	KEPT_GROUP_SHORT,     /* ... with a control area a page short */
	/* A JOIN: the pages and the group's area of generation 41, token 0x5eed, ... */
	JOIN_RIGHT,	       /* as asked */
	JOIN_OTHER_GENERATION, /* ... but of generation 42 */
	JOIN_STALE,	       /* refused with ESTALE */
	JOIN_OWNERS,	       /* the very files the last KEPT_RIGHT create handed */
};

struct fake_keeper {
	char dir[64];
	char path[128];
	int listener;
	enum fake_mode mode;
	pthread_t thread;
	bool remember; /* keep copies of what a create hands (pages, group area) in handed, for JOIN_OWNERS */
	int handed[2];
};

static struct fake_keeper fake;

static int make_memfd(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	return fd;
}

static void send_with_fds(int s, const uint8_t *buf, size_t len, const int *fds, size_t nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 8)];
	} control;
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		struct cmsghdr *c;

		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ck_assert_int_eq(sendmsg(s, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

/* The pages a library create() asked for, as fake.mode lies about them. */
static void fake_kept_pages(const struct mc_keeper_request *req, struct mc_keeper_reply *made, int *fds)
{
	uint64_t bytes = (req->size + req->page_size - 1) / req->page_size * req->page_size;
	int seals = F_SEAL_SHRINK | F_SEAL_GROW;

	made->generation = 41;
	made->size = bytes;
	made->page_size = fake.mode == KEPT_OTHER_PAGE_SIZE ? req->page_size * 2 : req->page_size;
	made->attach_flags = MC_KEEPER_ATTACH_WARM;
	made->caller_uid = (uint32_t)geteuid();
	made->owner_uid = made->caller_uid + (fake.mode == KEPT_OTHER_UID ? 1 : 0);
	made->descriptors = 1;
	fds[0] = memfd_create("fake-keeper-pages", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fds[0], 0);
	ck_assert_int_eq(ftruncate(fds[0], (off_t)(fake.mode == KEPT_SHORT ? bytes - 4096 : bytes)), 0);
	if (fake.mode == KEPT_WRITE_SEALED)
		seals |= F_SEAL_WRITE;
	if (fake.mode != KEPT_UNSEALED)
		ck_assert_int_eq(fcntl(fds[0], F_ADD_SEALS, seals), 0);
	if (!(req->flags & MC_KEEPER_CREATE_GROUP_CONTROL) || fake.mode == KEPT_NO_GROUP)
		return;
	/* The group's fresh control area, as the keeper makes it. */
	made->descriptors = 2;
	made->control_bytes = req->control_bytes;
	made->group_token = 0x5eed;
	fds[1] = memfd_create("fake-keeper-group", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fds[1], 0);
	ck_assert_int_eq(
		ftruncate(fds[1], (off_t)(req->control_bytes - (fake.mode == KEPT_GROUP_SHORT ? 4096 : 0))),
		0);
	if (fake.mode == KEPT_GROUP_WRITTEN)
		ck_assert_int_eq(pwrite(fds[1], "MCCT", 4, 0), 4);
	ck_assert_int_eq(fcntl(fds[1], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	for (int i = 0; i < 2 && fake.remember; i++)
		fake.handed[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
}

/* JOIN_OWNERS: the files the last create handed, as a keeper finds them again. */
static void fake_join_owners(struct mc_keeper_reply *made, int *fds)
{
	struct stat pages, area;

	ck_assert_int_eq(fstat(fake.handed[0], &pages), 0);
	ck_assert_int_eq(fstat(fake.handed[1], &area), 0);
	made->generation = 41;
	made->size = (uint64_t)pages.st_size;
	made->page_size = 4096;
	made->control_bytes = (uint64_t)area.st_size;
	made->owner_uid = made->caller_uid = (uint32_t)geteuid();
	made->descriptors = 2;
	made->group_token = 0x5eed;
	for (int i = 0; i < 2; i++)
		fds[i] = fcntl(fake.handed[i], F_DUPFD_CLOEXEC, 0);
}

/* The reply @mode makes to @req, with the descriptors to attach. */
static size_t fake_reply(const struct mc_keeper_request *req, uint8_t *out, int *fds, size_t *nfds)
{
	static struct mc_keeper_reply made;
	char why[256];
	int len;

	memset(&made, 0, sizeof(made));
	made.type = req->type | MC_KEEPER_REPLY;
	made.sequence = fake.mode == ANSWER_OTHER_SEQUENCE ? req->sequence + 7 : req->sequence;
	*nfds = 0;
	if (req->type == MC_KEEPER_HELLO) {
		made.version = 1;
		made.keeper_pid = (uint32_t)getpid();
		made.instance = 0x1234;
		made.message_max = MC_KEEPER_MESSAGE_MAX;
	} else if (req->type == MC_KEEPER_JOIN && fake.mode == JOIN_OWNERS) {
		fake_join_owners(&made, fds);
		*nfds = 2;
	} else if (req->type == MC_KEEPER_JOIN && fake.mode == JOIN_STALE) {
		made.status = ESTALE;
		snprintf(made.text, sizeof(made.text), "'%s' is at generation 42 now", req->name);
	} else if (req->type == MC_KEEPER_JOIN) {
		made.generation = fake.mode == JOIN_OTHER_GENERATION ? 42 : 41;
		made.size = made.page_size = made.control_bytes = 4096;
		made.owner_uid = made.caller_uid = (uint32_t)geteuid();
		made.descriptors = 2;
		made.group_token = 0x5eed;
		*nfds = 2;
		for (size_t i = 0; i < *nfds; i++)
			fds[i] = make_memfd("fake-keeper-join");
	} else if (req->type == MC_KEEPER_CREATE && fake.mode >= KEPT_RIGHT) {
		fake_kept_pages(req, &made, fds);
		*nfds = made.descriptors;
	} else if (req->type == MC_KEEPER_CREATE) {
		made.generation = 9;
		made.size = made.page_size = 4096;
		made.control_bytes = 4096;
		made.descriptors = 2;
		*nfds = fake.mode == ANSWER_ONE_OF_TWO ? 1 : fake.mode == ANSWER_FIVE ? 5 : 2;
		for (size_t i = 0; i < *nfds; i++)
			fds[i] = make_memfd("fake-keeper");
	} else {
		made.status = ENOENT;
		snprintf(made.text, sizeof(made.text), "no kept segment '%s'", req->name);
		if (fake.mode == ANSWER_REFUSAL_WITH_FD) {
			fds[0] = make_memfd("fake-keeper");
			*nfds = 1;
		}
	}
	len = mc_keeper_reply_encode(&made, out, MC_KEEPER_MESSAGE_MAX, why, sizeof(why));
	ck_assert_msg(len > 0, "%s", why);
	return (size_t)len;
}

static void *fake_keeper_main(void *arg)
{
	static uint8_t buf[MC_KEEPER_MESSAGE_MAX + 1];
	static struct mc_keeper_request req;
	int s = accept4(fake.listener, NULL, NULL, SOCK_CLOEXEC), fds[8];
	size_t nfds;
	ssize_t n;
	char why[256];

	(void)arg;
	if (s < 0)
		return NULL;
	n = recv(s, buf, sizeof(buf), 0);
	if (n > 0 && mc_keeper_request_decode(buf, (size_t)n, &req, why, sizeof(why)) == 0) {
		if (fake.mode == ANSWER_NEVER) {
			while (recv(s, buf, sizeof(buf), 0) > 0)
				;
		} else {
			size_t len = fake_reply(&req, buf, fds, &nfds);

			send_with_fds(s, buf, len, fds, nfds);
			for (size_t i = 0; i < nfds; i++)
				close(fds[i]);
		}
	}
	close(s);
	return NULL;
}

static void fake_keeper_start(enum fake_mode mode)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };

	snprintf(fake.dir, sizeof(fake.dir), "/tmp/mc-keeper-client.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(fake.dir));
	snprintf(fake.path, sizeof(fake.path), "%s/keeper.sock", fake.dir);
	memcpy(addr.sun_path, fake.path, strlen(fake.path));
	fake.listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(fake.listener, (struct sockaddr *)&addr, sizeof(addr)), 0);
	ck_assert_int_eq(listen(fake.listener, 4), 0);
	fake.mode = mode;
	ck_assert_int_eq(pthread_create(&fake.thread, NULL, fake_keeper_main, NULL), 0);
}

static void fake_keeper_stop(void)
{
	pthread_join(fake.thread, NULL);
	close(fake.listener);
	unlink(fake.path);
	rmdir(fake.dir);
}

/* One exchange of a request of @type with the fake keeper in @mode: its result, the reply, the descriptors. */
static int exchange_with(enum fake_mode mode, uint16_t type, struct mc_keeper_reply *rep, int fds[2],
			 int timeout_ms)
{
	struct mc_keeper_request req = { .type = type };
	struct mc_keeper_conn conn;
	int rc;

	fake_keeper_start(mode);
	snprintf(req.name, sizeof(req.name), "kv");
	if (type == MC_KEEPER_CREATE) {
		req.size = 4096;
		req.world_size = 1;
	}
	ck_assert_msg(mc_keeper_open(&conn, fake.path, 5000) == 0, "%s", mooncake_segment_last_error());
	rc = mc_keeper_exchange(&conn, &req, rep, fds, timeout_ms);
	mc_keeper_close(&conn);
	fake_keeper_stop();
	return rc;
}

static struct mc_keeper_reply rep;

/* A library create() of a kept segment, world size 1, against the fake
 * keeper in @mode: create's result; *@seg is the segment when it succeeds. */
static int kept_create(enum fake_mode mode, struct mooncake_segment **seg)
{
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	int rc;

	mooncake_segment_options_init(&opt);
	opt.world_size = 1;
	opt.keep_name = "kv";
	fake_keeper_start(mode);
	setenv("MOONCAKE_SEGMENT_KEEPER", fake.path, 1);
	*seg = NULL;
	rc = mooncake_segment_create("kv", 4 << 20, &opt, seg, blob);
	if (rc == 0)
		ck_assert_int_eq(mooncake_segment_complete(*seg, blob, sizeof(blob)), 0);
	unsetenv("MOONCAKE_SEGMENT_KEEPER");
	fake_keeper_stop();
	return rc;
}

/* Whether this process maps a file whose /proc/self/maps path holds @needle. */
static bool maps_hold(const char *needle)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert_ptr_nonnull(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

START_TEST(test_create_maps_the_kept_pages_it_is_handed)
{
	struct mooncake_segment *seg;
	struct mooncake_segment_info info;
	int before = count_fds();
	char *base;

	ck_assert_msg(kept_create(KEPT_RIGHT, &seg) == 0, "%s", mooncake_segment_last_error());
	ck_assert(mooncake_segment_warm(seg));
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.keep_generation, 41);
	/* The group's control area is the one the keeper made, not one of its own. */
	ck_assert(maps_hold("/memfd:fake-keeper-group"));
	ck_assert(!maps_hold("/memfd:mooncake-segment-control:"));
	base = mooncake_segment_base(seg);
	base[0] = 'k';
	base[(4 << 20) - 1] = 'v';
	ck_assert_int_eq(mooncake_segment_finish(seg), 0);
	mooncake_segment_destroy(seg);
	ck_assert_int_eq(count_fds(), before);
}
END_TEST

/* Pages create() must not trust: refused naming why, nothing left open. */
static void check_kept_lie(enum fake_mode mode, int err, const char *needle)
{
	struct mooncake_segment *seg;
	int before = count_fds();

	ck_assert_int_eq(kept_create(mode, &seg), err);
	ck_assert_ptr_null(seg);
	ck_assert_msg(strstr(mooncake_segment_last_error(), needle), "%s", mooncake_segment_last_error());
	ck_assert_int_eq(count_fds(), before);
}

START_TEST(test_create_refuses_kept_pages_it_cannot_trust)
{
	check_kept_lie(KEPT_UNSEALED, -EPROTO,
		       "not a memfd of 4194304 bytes sealed against shrinking and growing");
	check_kept_lie(KEPT_SHORT, -EPROTO, "sent a file of 4190208 bytes");
	check_kept_lie(KEPT_WRITE_SEALED, -EPROTO, "sealed against writing");
	check_kept_lie(KEPT_OTHER_UID, -EACCES, "refusing pages that another user controls");
	check_kept_lie(KEPT_OTHER_PAGE_SIZE, -EPROTO, "in pages of 8192, this create needs");
	check_kept_lie(KEPT_NO_GROUP, -EPROTO, "answered without the group's control area");
	check_kept_lie(KEPT_GROUP_WRITTEN, -EPROTO, "not a fresh one");
	check_kept_lie(KEPT_GROUP_SHORT, -EPROTO, "the node keeper's control area holds");
}
END_TEST

START_TEST(test_a_right_hello_and_create_are_taken)
{
	int fds[2], before = count_fds();

	ck_assert_int_eq(exchange_with(ANSWER_RIGHT, MC_KEEPER_HELLO, &rep, fds, 5000), 0);
	ck_assert_uint_eq(rep.keeper_pid, (unsigned)getpid());
	ck_assert_int_eq(fds[0], -1);
	ck_assert_int_eq(exchange_with(ANSWER_RIGHT, MC_KEEPER_CREATE, &rep, fds, 5000), 0);
	ck_assert_uint_eq(rep.generation, 9);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_ge(fds[i], 0);
		ck_assert_int_eq(fcntl(fds[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
		close(fds[i]);
	}
	ck_assert_int_eq(count_fds(), before);
}
END_TEST

START_TEST(test_a_refusal_is_a_reply_with_its_sentence)
{
	int fds[2];

	ck_assert_int_eq(exchange_with(ANSWER_RIGHT, MC_KEEPER_STAT, &rep, fds, 5000), 0);
	ck_assert_uint_eq(rep.status, ENOENT);
	ck_assert_str_eq(rep.text, "no kept segment 'kv'");
}
END_TEST

/* Each lie is -EPROTO naming it, and every descriptor it carried is closed. */
static void check_lie(enum fake_mode mode, uint16_t type, const char *needle)
{
	int fds[2], before = count_fds();

	ck_assert_int_eq(exchange_with(mode, type, &rep, fds, 5000), -EPROTO);
	ck_assert_msg(strstr(mooncake_segment_last_error(), needle), "%s", mooncake_segment_last_error());
	ck_assert_int_eq(fds[0], -1);
	ck_assert_int_eq(fds[1], -1);
	ck_assert_int_eq(count_fds(), before);
}

START_TEST(test_a_reply_to_another_request_is_refused)
{
	check_lie(ANSWER_OTHER_SEQUENCE, MC_KEEPER_HELLO, "answers request");
}
END_TEST

START_TEST(test_descriptors_with_a_refusal_are_closed_and_refused)
{
	check_lie(ANSWER_REFUSAL_WITH_FD, MC_KEEPER_STAT, "carries 1 descriptors, announces 0");
}
END_TEST

START_TEST(test_fewer_descriptors_than_announced_are_refused)
{
	check_lie(ANSWER_ONE_OF_TWO, MC_KEEPER_CREATE, "carries 1 descriptors, announces 2");
}
END_TEST

START_TEST(test_more_descriptors_than_announced_are_all_closed)
{
	check_lie(ANSWER_FIVE, MC_KEEPER_CREATE, "carries more than");
}
END_TEST

START_TEST(test_a_silent_keeper_is_a_timeout_not_a_hang)
{
	int fds[2];

	ck_assert_int_eq(exchange_with(ANSWER_NEVER, MC_KEEPER_HELLO, &rep, fds, 200), -ETIMEDOUT);
	ck_assert_ptr_nonnull(strstr(mooncake_segment_last_error(), "did not answer HELLO in time"));
}
END_TEST

START_TEST(test_no_keeper_names_the_path_and_the_fix)
{
	struct mc_keeper_conn conn;
	char long_path[200];

	ck_assert_int_eq(mc_keeper_open(&conn, "/nonexistent/keeper.sock", 1000), -ENOENT);
	ck_assert_ptr_nonnull(
		strstr(mooncake_segment_last_error(), "No node keeper answers at /nonexistent/keeper.sock"));
	ck_assert_ptr_nonnull(strstr(mooncake_segment_last_error(), "MOONCAKE_SEGMENT_KEEPER"));
	ck_assert_int_eq(conn.fd, -1);
	memset(long_path, 'k', sizeof(long_path) - 1);
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	ck_assert_int_eq(mc_keeper_open(&conn, long_path, 1000), -EINVAL);
	ck_assert_ptr_nonnull(strstr(mooncake_segment_last_error(), "too long"));
}
END_TEST

START_TEST(test_the_socket_path_comes_from_the_environment)
{
	unsetenv("MOONCAKE_SEGMENT_KEEPER");
	ck_assert_str_eq(mc_keeper_socket_path(), MC_KEEPER_DEFAULT_SOCKET);
	setenv("MOONCAKE_SEGMENT_KEEPER", "/tmp/k.sock", 1);
	ck_assert_str_eq(mc_keeper_socket_path(), "/tmp/k.sock");
	unsetenv("MOONCAKE_SEGMENT_KEEPER");
}
END_TEST

#define SQUATTER 54321 /* a uid no account has */

/* Another user bound the path first: the client refuses to talk to it. */
START_TEST(test_a_keeper_of_another_user_is_refused)
{
	struct mc_keeper_conn conn;
	int ready[2], status;
	char byte, dir[64], path[128];
	pid_t squatter;

	if (geteuid() != 0) {
		fprintf(stderr,
			"# SKIP another user's keeper: needs root to run a process as a second uid\n");
		return;
	}
	snprintf(dir, sizeof(dir), "/tmp/mc-keeper-squat.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0777), 0);
	snprintf(path, sizeof(path), "%s/keeper.sock", dir);
	ck_assert_int_eq(pipe(ready), 0);
	squatter = fork();
	ck_assert_int_ge(squatter, 0);
	if (squatter == 0) {
		struct sockaddr_un addr = { .sun_family = AF_UNIX };
		int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		memcpy(addr.sun_path, path, strlen(path));
		if (setresgid(SQUATTER, SQUATTER, SQUATTER) != 0 ||
		    setresuid(SQUATTER, SQUATTER, SQUATTER) != 0 ||
		    bind(s, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(s, 4) != 0 ||
		    write(ready[1], "r", 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	ck_assert_int_eq(read(ready[0], &byte, 1), 1);
	ck_assert_int_eq(mc_keeper_open(&conn, path, 1000), -EACCES);
	ck_assert_msg(strstr(mooncake_segment_last_error(), "is served by uid 54321"), "%s",
		      mooncake_segment_last_error());
	ck_assert_int_eq(conn.fd, -1);
	kill(squatter, SIGKILL);
	ck_assert_int_eq(waitpid(squatter, &status, 0), squatter);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* The owner's handle trailer: what it encodes decodes, and nothing else does. */
START_TEST(test_the_join_offer_in_the_handle_round_trips_and_refuses_junk)
{
	struct mc_keeper_ref k = { .owner_uid = 1000, .token = 0x0123456789abcdefULL }, back = { 0 };
	uint8_t bytes[MC_KEEPER_REF_BYTES + 1] = { 0 };

	ck_assert_uint_eq(mc_keeper_ref_encode(&k, bytes, MC_KEEPER_REF_BYTES - 1), 0);
	ck_assert_uint_eq(mc_keeper_ref_encode(&k, bytes, sizeof(bytes)), MC_KEEPER_REF_BYTES);
	ck_assert(mc_keeper_ref_decode(bytes, MC_KEEPER_REF_BYTES, &back));
	ck_assert_uint_eq(back.owner_uid, 1000);
	ck_assert(back.token == k.token);
	ck_assert(!mc_keeper_ref_decode(bytes, MC_KEEPER_REF_BYTES + 1, &back));
	ck_assert(!mc_keeper_ref_decode(bytes, MC_KEEPER_REF_BYTES - 1, &back));
	bytes[0] ^= 1; /* not the marker */
	ck_assert(!mc_keeper_ref_decode(bytes, MC_KEEPER_REF_BYTES, &back));
	bytes[0] ^= 1;
	memset(bytes + 8, 0, 8); /* no token */
	ck_assert(!mc_keeper_ref_decode(bytes, MC_KEEPER_REF_BYTES, &back));
}
END_TEST

/* A JOIN against the fake keeper in @mode: its result and, on success, the two descriptors. */
static int join_with(enum fake_mode mode, int fds[2], struct mc_tracked_fd tracking[2])
{
	struct mc_keeper_ref k = {
		.name = "kv", .generation = 41, .owner_uid = (uint32_t)geteuid(), .token = 0x5eed
	};
	int rc;

	fake_keeper_start(mode);
	setenv("MOONCAKE_SEGMENT_KEEPER", fake.path, 1);
	rc = mc_keeper_join(&k, fds, tracking);
	unsetenv("MOONCAKE_SEGMENT_KEEPER");
	fake_keeper_stop();
	return rc;
}

START_TEST(test_a_join_takes_what_it_asked_for_and_nothing_else)
{
	struct mc_tracked_fd tracking[2];
	int fds[2], before = count_fds();

	ck_assert_msg(join_with(JOIN_RIGHT, fds, tracking) == 0, "%s", mooncake_segment_last_error());
	ck_assert_int_ge(fds[0], 0);
	ck_assert_int_ge(fds[1], 0);
	mc_fd_close(&tracking[0]);
	mc_fd_close(&tracking[1]);
	ck_assert_int_eq(count_fds(), before);

	ck_assert_int_eq(join_with(JOIN_OTHER_GENERATION, fds, tracking), -EPROTO);
	ck_assert_msg(
		strstr(mooncake_segment_last_error(), "generation 42 (group 0000000000005eed), not uid"),
		"%s", mooncake_segment_last_error());
	ck_assert_int_eq(fds[0], -1);
	ck_assert_int_eq(fds[1], -1);
	ck_assert_int_eq(count_fds(), before);

	ck_assert_int_eq(join_with(JOIN_STALE, fds, tracking), -ENOENT);
	ck_assert_msg(strstr(mooncake_segment_last_error(), "refused to hand kept segment 'kv'") &&
			      strstr(mooncake_segment_last_error(), "is at generation 42 now"),
		      "%s", mooncake_segment_last_error());
	ck_assert_int_eq(count_fds(), before);
}
END_TEST

/* A peer whose routes to its owner fail (here: the owner finished, so it
 * serves nothing) asks the keeper, and keeps only the owner's own files. */
static int join_after_the_owner_finished(enum fake_mode join_mode, char *owner_base_out, char *peer_base_out)
{
	struct mooncake_segment_options o, p;
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	int rc;

	mooncake_segment_options_init(&o);
	o.world_size = 2;
	o.keep_name = "kv";
	p = o;
	p.rank_id = 1;
	fake.remember = true;
	fake_keeper_start(KEPT_RIGHT);
	setenv("MOONCAKE_SEGMENT_KEEPER", fake.path, 1);
	ck_assert_msg(mooncake_segment_create("kv", 4 << 20, &o, &owner, blobs) == 0, "%s",
		      mooncake_segment_last_error());
	fake_keeper_stop();
	ck_assert_int_eq(
		mooncake_segment_create("kv", 4 << 20, &p, &peer, blobs + MOONCAKE_SEGMENT_BLOB_SIZE), 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	((char *)mooncake_segment_base(owner))[5] = 'j';
	ck_assert_int_eq(mooncake_segment_finish(owner), 0);
	fake_keeper_start(join_mode);
	setenv("MOONCAKE_SEGMENT_KEEPER", fake.path, 1);
	rc = mooncake_segment_complete(peer, blobs, sizeof(blobs));
	unsetenv("MOONCAKE_SEGMENT_KEEPER");
	fake_keeper_stop();
	if (rc == 0) {
		((char *)mooncake_segment_base(peer))[6] = 'p';
		*owner_base_out = ((char *)mooncake_segment_base(owner))[6];
		*peer_base_out = ((char *)mooncake_segment_base(peer))[5];
	}
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	for (int i = 0; i < 2; i++)
		close(fake.handed[i]);
	fake.remember = false;
	return rc;
}

START_TEST(test_a_peer_that_cannot_reach_its_owner_joins_through_the_keeper)
{
	char seen_by_owner = 0, seen_by_peer = 0;
	int before = count_fds();

	ck_assert_msg(join_after_the_owner_finished(JOIN_OWNERS, &seen_by_owner, &seen_by_peer) == 0, "%s",
		      mooncake_segment_last_error());
	ck_assert_int_eq(seen_by_peer, 'j');
	ck_assert_int_eq(seen_by_owner, 'p');
	ck_assert_int_eq(count_fds(), before);
	/* A keeper that hands other files than the owner's handle names is refused, both causes named. */
	ck_assert_int_ne(join_after_the_owner_finished(JOIN_RIGHT, &seen_by_owner, &seen_by_peer), 0);
	ck_assert_msg(strstr(mooncake_segment_last_error(), "the node keeper could not hand them either") &&
			      strstr(mooncake_segment_last_error(), "pages that is not the owner's"),
		      "%s", mooncake_segment_last_error());
	ck_assert_int_eq(count_fds(), before);
}
END_TEST

static Suite *suite_keeper_client(void)
{
	Suite *s = suite_create("keeper-client");
	TCase *tc = tcase_create("client");

	tcase_add_test(tc, test_a_right_hello_and_create_are_taken);
	tcase_add_test(tc, test_a_refusal_is_a_reply_with_its_sentence);
	tcase_add_test(tc, test_a_reply_to_another_request_is_refused);
	tcase_add_test(tc, test_descriptors_with_a_refusal_are_closed_and_refused);
	tcase_add_test(tc, test_fewer_descriptors_than_announced_are_refused);
	tcase_add_test(tc, test_more_descriptors_than_announced_are_all_closed);
	tcase_add_test(tc, test_a_silent_keeper_is_a_timeout_not_a_hang);
	tcase_add_test(tc, test_no_keeper_names_the_path_and_the_fix);
	tcase_add_test(tc, test_the_socket_path_comes_from_the_environment);
	tcase_add_test(tc, test_a_keeper_of_another_user_is_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("library");
	tcase_add_test(tc, test_create_maps_the_kept_pages_it_is_handed);
	tcase_add_test(tc, test_create_refuses_kept_pages_it_cannot_trust);
	tcase_add_test(tc, test_the_join_offer_in_the_handle_round_trips_and_refuses_junk);
	tcase_add_test(tc, test_a_join_takes_what_it_asked_for_and_nothing_else);
	tcase_add_test(tc, test_a_peer_that_cannot_reach_its_owner_joins_through_the_keeper);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *runner = srunner_create(suite_keeper_client());
	int failed;

	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
