/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fork-and-all-gather group (see group.h).  Framing: a rank sends a 4-byte
 * length and the payload; when every live rank has sent a round, the hub
 * sends each of them the 4-byte total and the concatenation.  A length of
 * UINT32_MAX from the hub means the round failed.
 */
#include "config.h"

#include "group.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GROUP_MAX    256
#define ROUND_FAILED UINT32_MAX

static pid_t pids[GROUP_MAX];

pid_t group_pid(uint32_t rank)
{
	return rank < GROUP_MAX ? pids[rank] : -1;
}

/* Send (@sending) or read exactly @len bytes; -EPIPE once the other end is gone. */
static int transfer_all(int fd, uint8_t *p, size_t len, bool sending)
{
	while (len) {
		ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	return transfer_all(fd, (uint8_t *)(uintptr_t)buf, len, true); /* send() only reads it */
}

static int read_all(int fd, void *buf, size_t len)
{
	return transfer_all(fd, buf, len, false);
}

int group_allgather(struct group_rank *self, const void *mine, size_t len, void *all)
{
	uint32_t n = (uint32_t)len, total;

	if (write_all(self->sock, &n, sizeof(n)) || write_all(self->sock, mine, len) ||
	    read_all(self->sock, &total, sizeof(total)))
		return -EPIPE;
	if (total == ROUND_FAILED || total != n * self->world_size)
		return -EPIPE;
	return read_all(self->sock, all, total);
}

int group_barrier(struct group_rank *self)
{
	uint8_t token = 1, all[GROUP_MAX];

	return group_allgather(self, &token, 1, all);
}

struct hub_rank {
	int sock;
	bool alive; /* connection still open */
	bool sent;  /* contributed to the current round */
	uint32_t len;
	uint8_t *data;
};

static long elapsed_ms(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

/* Finish a round: everyone alive sent; broadcast the concatenation, or fail it. */
static void close_round(struct hub_rank *r, uint32_t world, bool failed)
{
	uint32_t len = 0, total;
	size_t off = 0;
	uint8_t *all = NULL;

	for (uint32_t i = 0; i < world; i++)
		if (r[i].sent) {
			len = r[i].len;
			break;
		}

	for (uint32_t i = 0; i < world && !failed; i++)
		failed = !r[i].alive || r[i].len != len;
	if (!failed)
		all = malloc((size_t)len * world + 1);
	failed = failed || !all;
	total = failed ? ROUND_FAILED : len * world;
	for (uint32_t i = 0; !failed && i < world; i++, off += len)
		memcpy(all + off, r[i].data, len);
	for (uint32_t i = 0; i < world; i++) {
		if (!r[i].alive)
			continue;
		if (r[i].sent)
			if (write_all(r[i].sock, &total, sizeof(total)) ||
			    (!failed && write_all(r[i].sock, all, total)))
				r[i].alive = false;
		free(r[i].data);
		r[i].data = NULL;
		r[i].sent = false;
	}
	free(all);
}

/* One rank's message arrived (or its socket closed). */
static void hub_receive(struct hub_rank *rank)
{
	if (read_all(rank->sock, &rank->len, sizeof(rank->len)) != 0) {
		rank->alive = false;
		return;
	}
	rank->data = malloc(rank->len ? rank->len : 1);
	if (!rank->data || read_all(rank->sock, rank->data, rank->len) != 0) {
		rank->alive = false;
		return;
	}
	rank->sent = true;
}

static void serve(struct hub_rank *r, uint32_t world, int timeout_ms, const struct timespec *start,
		  bool *timed_out)
{
	struct pollfd fds[GROUP_MAX];
	bool dead_seen = false;

	for (;;) {
		uint32_t alive = 0, sent = 0;
		int wait_ms;

		for (uint32_t i = 0; i < world; i++) {
			alive += r[i].alive;
			sent += r[i].alive && r[i].sent;
			dead_seen = dead_seen || !r[i].alive;
			fds[i].fd = r[i].alive && !r[i].sent ? r[i].sock : -1;
			fds[i].events = POLLIN;
			fds[i].revents = 0;
		}
		if (!alive)
			return;
		/* Once a rank is gone, no round can complete: fail the waiting ones. */
		if (sent && (dead_seen || sent == alive)) {
			close_round(r, world, dead_seen);
			continue;
		}
		wait_ms = timeout_ms - (int)elapsed_ms(start);
		if (wait_ms <= 0) {
			*timed_out = true;
			return;
		}
		if (poll(fds, world, wait_ms) < 0 && errno != EINTR)
			return;
		for (uint32_t i = 0; i < world; i++)
			if (fds[i].revents)
				hub_receive(&r[i]);
	}
}

int group_run(uint32_t world_size, group_rank_fn fn, void *arg, int timeout_ms, int *exit_codes)
{
	struct hub_rank ranks[GROUP_MAX];
	struct timespec start;
	bool timed_out = false;
	int err = 0;

	if (world_size == 0 || world_size > GROUP_MAX)
		return -EINVAL;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (uint32_t i = 0; i < world_size; i++)
		ranks[i] = (struct hub_rank){ -1, false, false, 0, NULL };
	for (uint32_t i = 0; i < world_size; i++) {
		int sv[2];

		pids[i] = -1;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
			err = -errno;
			break;
		}
		pids[i] = fork();
		if (pids[i] == 0) {
			struct group_rank self = { i, world_size, sv[1] };

			close(sv[0]);
			for (uint32_t j = 0; j < i; j++)
				close(ranks[j].sock);
			int code = fn(&self, arg);

			fflush(NULL); /* _exit skips stdio */
			_exit(code);
		}
		close(sv[1]);
		if (pids[i] < 0) {
			err = -errno;
			close(sv[0]);
			break;
		}
		ranks[i] = (struct hub_rank){ sv[0], true, false, 0, NULL };
	}
	if (!err)
		serve(ranks, world_size, timeout_ms, &start, &timed_out);
	for (uint32_t i = 0; i < world_size; i++) {
		int status = 0;

		if (ranks[i].sock >= 0)
			close(ranks[i].sock);
		free(ranks[i].data);
		if (pids[i] <= 0) {
			exit_codes[i] = -1;
			continue;
		}
		if (timed_out || err)
			kill(pids[i], SIGKILL);
		while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
			;
		exit_codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	}
	return err ? err : timed_out ? -ETIMEDOUT : 0;
}
