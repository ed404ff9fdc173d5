/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The owner's side of passing a descriptor to the peers of a segment: an
 * offer names the descriptor (pid, number, device, inode) so that a peer can
 * reach it through /proc or pidfd_getfd (peer-fd.c).  Every live offer is on
 * one list, so that the memory of an offer a forked child inherited stays
 * reachable until the child withdraws it.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct mc_fd_offer {
	pid_t server_pid; /* the process that made the offer */
	struct mc_fd_offer *next;
};

static pthread_mutex_t offers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mc_fd_offer *offers;

int mc_peer_fd_offer(int fd, struct mc_peer_fd *h, struct mc_fd_offer **offer)
{
	struct mc_fd_offer *o;
	struct stat st;

	if (fstat(fd, &st) != 0)
		return mc_error_sys(EIO, errno, "Shared segment fstat of the descriptor to share failed");
	o = calloc(1, sizeof(*o));
	if (!o)
		return mc_error(ENOMEM, "Shared segment: out of memory");
	memset(h, 0, sizeof(*h));
	h->pid = (uint32_t)getpid();
	h->fd = (uint32_t)fd;
	h->dev = (uint64_t)st.st_dev;
	h->ino = (uint64_t)st.st_ino;
	o->server_pid = getpid();
	pthread_mutex_lock(&offers_lock);
	o->next = offers;
	offers = o;
	pthread_mutex_unlock(&offers_lock);
	*offer = o;
	return 0;
}

void mc_peer_fd_withdraw(struct mc_fd_offer **offer)
{
	struct mc_fd_offer *o = offer ? *offer : NULL;

	if (!o)
		return;
	pthread_mutex_lock(&offers_lock);
	for (struct mc_fd_offer **p = &offers; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			break;
		}
	pthread_mutex_unlock(&offers_lock);
	free(o);
	*offer = NULL;
}
