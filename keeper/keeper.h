/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segmentd, the node keeper (issue 25, doc/keeper.md): it holds
 * named segments (their memfds) past the processes that map them, and hands
 * their descriptors to the processes it allows, over the protocol of
 * doc/keeper-protocol.md (lib/route/keeper-wire.h).
 *
 * One job per file:
 *   main.c     options, signals, the start and the stop;
 *   log.c      the one log: stderr, with the journal's priorities;
 *   server.c   the listening socket, the poll loop, connections (credentials,
 *              limits, timeouts), decoding requests and sending replies;
 *   account.c  whose share a client uses: the uid its per-uid limits count
 *              against (its subordinate range's or user namespace's user);
 *   store.c    the table of kept segments: create or attach, list, stat,
 *              release, sharing, the budget and the idle timeout;
 *   declaration.c a CREATE's declaration against the kept one: the field
 *              that differs and the sentence naming it (declaration.h);
 *   commit.c   allocating and committing a kept segment's pages with the
 *              library's own backend, room check and commit lock, charged
 *              to the keeper's memory cgroup;
 *   committer.c the committer threads: each cold create's commit runs on one
 *              (--max-commits at once, --uid-max-commits per uid, the rest
 *              queued), so that the poll loop keeps serving everyone else,
 *              and reports back through an eventfd the loop watches;
 *   scanner.c  the mapper scanner: who maps which segment, one pass over
 *              /proc/PID/maps on a thread of its own, for the same reason;
 *   service.c  the service manager: socket activation (LISTEN_FDS) and the
 *              file descriptor store (FDSTORE=1), through libsystemd when
 *              configure found it;
 *   state.c    the table's metadata in a memfd the descriptor store keeps,
 *              so that a restarted keeper knows what its descriptors are.
 *
 * The keeper links the library's core statically (lib/libmooncake-segment-
 * core.la): it commits pages exactly as create() does, through internals
 * that are no interface for applications.
 */
#ifndef MOONCAKE_SEGMENTD_KEEPER_H
#define MOONCAKE_SEGMENTD_KEEPER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "route/keeper-wire.h"

/* --- configuration (main.c) ------------------------------------------------ */

struct keeper_config {
	const char *socket_path;    /* --socket; default MC_KEEPER_DEFAULT_SOCKET */
	uint64_t budget_bytes;	    /* --budget: most bytes kept in all; 0 unlimited */
	uint32_t max_segments;	    /* --max-segments (default 1024) */
	uint64_t uid_budget_bytes;  /* --uid-budget: most bytes one owner uid keeps; 0 unlimited
				      * (default three quarters of the budget or of the node) */
	bool uid_budget_set;	    /* --uid-budget given (0 then means no limit) */
	uint32_t uid_max_segments;  /* --uid-max-segments: most one owner uid keeps (default a
				      * quarter of max_segments, at least 1) */
	uint32_t max_connections;   /* --max-connections (default 256) */
	uint32_t max_per_uid;	    /* --max-connections-per-uid (default a quarter of
				      * max_connections, at least 1) */
	uint32_t idle_timeout_s;    /* --idle-timeout: free a segment this long after
				      * its last mapper went (and nobody attached); 0 never */
	uint32_t silent_timeout_ms; /* a connection that sends nothing this long is closed (10 s;
				      * the hidden --silent-timeout-ms, for tests) */
	mode_t socket_mode;	    /* --socket-mode (default 0666: the directory gates) */
	uint32_t scan_cache_ms;	    /* how long STAT and LIST reuse one mapper scan (1 s; the hidden
				      * --scan-cache-ms, for tests) */
	uint32_t max_commits;	    /* --max-commits: committer threads at once (default 2) */
	uint32_t uid_max_commits;   /* --uid-max-commits: of one owner uid (default 1) */
	const char *subuid_file;    /* --subuid-file (default ACCOUNT_SUBUID_DEFAULT) */
};

struct commit_job;

/* --- one kept segment (store.c) -------------------------------------------- */

struct kept_segment {
	struct mc_keeper_segment record; /* what STAT and LIST report (mappers filled when asked) */
	char *declaration; /* its CREATE's declaration (malloc'd, printable ASCII, NUL-terminated):
			    * what a refusal compares field by field; NULL when none was given */
	int pages_fd;	   /* the segment's memfd */
	int control_fd;	   /* the control area's memfd, -1 when control_bytes is 0 */
	bool hugetlb;
	uint64_t last_mapped_ns;       /* CLOCK_MONOTONIC when mappers were last seen > 0 (idle timeout) */
	uint32_t mappers_seen;	       /* the last count: processes whose maps the keeper could read */
	uint64_t counted_by;	       /* the mapper scan that counted it last (0: none yet) */
	bool handed_unseen;	       /* handed to a peer whose maps the keeper cannot read (another PID
				  * namespace: pid 0): mapped, mappers unknown, until released */
	struct commit_job *committing; /* while a committer thread commits its pages: reserved
					* (counted by the budget and the limits), pages_fd -1,
					* never saved, listed or released; NULL once kept */
	uint32_t commit_flags;	       /* its creator's reply flags once committed (replaced) */
	bool creator_unseen;	       /* its creator's maps are unreadable (see handed_unseen) */
	pid_t creator_pid;
	uint32_t account_uid;	     /* whose per-uid limits it counts in (account.c): its creator's account,
			       * the owner itself unless a subordinate uid or user namespace made it */
	uint64_t commit_group_bytes; /* its creator's group control area, made once committed; 0: none */
	/* The control areas made for its last groups (CREATE with the group
	 * control area flag), found again by JOIN with their token; a slot
	 * whose token is 0 is empty.  Not stored, not saved: a restart of the
	 * keeper forgets them. */
	struct group_area {
		uint64_t token;
		int fd;
		uint64_t bytes;	    /* counted by the budgets and LIST's control_bytes while held */
		uint64_t handed_ns; /* CLOCK_MONOTONIC of its last CREATE or JOIN reply */
	} groups[MC_KEEPER_GROUPS_PER_SEGMENT];
	unsigned int groups_next; /* the slot the next group takes (the oldest) */
};

/* --- logging (log.c) ------------------------------------------------------- */

/* syslog(3)'s priorities, as the journal reads them from a "<N>" prefix. */
#define KEEPER_LOG_ERR	   3
#define KEEPER_LOG_WARNING 4
#define KEEPER_LOG_NOTICE  5
#define KEEPER_LOG_INFO	   6
#define KEEPER_LOG_DEBUG   7

/* One line on stderr: "<priority>" when stderr is the journal, else
 * "mooncake-segmentd: ", then the message. */
void keeper_say(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void keeper_vsay(int priority, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* keeper_say() at KEEPER_LOG_INFO. */
void keeper_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* keeper_say() at KEEPER_LOG_DEBUG, only when MOONCAKE_SEGMENTD_DEBUG=1. */
void keeper_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A budget of lines for one kind of event, so that a client that loops on
 * a refused request, or a flood, cannot flood the journal: at most @burst
 * lines in each @window_s seconds, then, before the next line allowed, one
 * saying how many were left out.  One static limit per kind of event:
 *   static struct keeper_log_limit limit = KEEPER_LOG_LIMIT(10, 60); */
struct keeper_log_limit {
	unsigned int burst;
	unsigned int window_s;
	uint64_t window_start_ns;
	unsigned int said;
	unsigned int left_out;
};
#define KEEPER_LOG_LIMIT(burst, window_s)    \
	{                                    \
		(burst), (window_s), 0, 0, 0 \
	}
/* keeper_say() at @priority if @limit allows it now. */
void keeper_say_limited(struct keeper_log_limit *limit, int priority, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* --- ids the keeper cannot tell apart (user-namespace.c) ------------------- */

/* Read whether the keeper runs in a user namespace other than the initial
 * one, and its overflow ids; says so in the log when it does. */
void user_namespace_start(void);
/* Whether a client's @uid or @gid is what the keeper sees for every id
 * outside its namespace's maps: such a client must be refused. */
bool user_namespace_unmapped(uid_t uid, gid_t gid);
/* Whether @gid is the overflow gid, which stands for every unmapped group:
 * no one is a member of it (a supplementary group the namespace does not
 * map shows as it too). */
bool user_namespace_unmapped_gid(gid_t gid);

/* --- whose share a client uses (account.c) --------------------------------- */

#define ACCOUNT_SUBUID_DEFAULT "/etc/subuid"

/* Note the keeper's own user namespace, and read @subuid_file (NULL: the
 * default), saying what it holds. */
void account_start(const char *subuid_file);
/* The account of the peer at @fd (@uid and @pid from SO_PEERCRED): the uid
 * whose per-uid limits it counts against.  The owner of its user namespace
 * (the one right below the keeper's, unless root made it), then the user
 * whose /etc/subuid range holds that uid, else @uid.  Never blocks long:
 * a few system calls, and the file read again only when it changed. */
uid_t account_of(int fd, uid_t uid, pid_t pid);
/* "uid U", or "uid U (counted with uid A, whose ...)" when @account is not
 * @uid, for a refusal to name whose limit it is; @out. */
const char *account_describe(char *out, size_t size, uid_t uid, uid_t account);

/* --- the socket and the loop (server.c) ------------------------------------ */

/* Who is at the other end of a connection, from SO_PEERCRED and
 * SO_PEERGROUPS when it was accepted (never from a message). */
struct keeper_peer {
	uid_t uid;
	uid_t account; /* whose per-uid limits it counts against (account.c); access goes by uid */
	gid_t gid;
	pid_t pid;
	gid_t *groups; /* supplementary groups; NULL when the kernel gave none */
	size_t group_count;
};

/* The listening socket: the one the service manager passed, else bound at
 * config->socket_path (a stale socket replaced, a live keeper refused).
 * *@bound_here says whether the keeper made the path (and so removes it). */
int server_listen(const struct keeper_config *config, bool *bound_here);
/* Serve until a signal arrives on @signal_fd (a signalfd): 0, or a negative
 * errno after a logged failure of the loop itself. */
int server_run(const struct keeper_config *config, int listen_fd, int signal_fd);

/* --- the table (store.c) --------------------------------------------------- */

/* Load what a previous keeper saved (state_load, descriptors from the
 * service manager); 0 or a negative errno with a logged reason. */
int store_start(const struct keeper_config *config);
/* Write a save that was put off (a warm attach's count), before the stop
 * is announced to the service manager. */
void store_flush(void);
/* Close every descriptor (the kernel keeps pages that are still mapped). */
void store_stop(void);
uint32_t store_count(void);
/* What a request waits for instead of its reply: nothing (generation 0),
 * or the commit of the segment of that generation, as its creator (its
 * reply comes from store_commit_done()) or behind it (a CREATE of the same
 * name, handled again with @behind_commit once the commit is done). */
struct store_wait {
	uint64_t generation;
	bool creator;
	uint64_t scan; /* or the mapper scan of this serial: handled again once it is done */
};
/* Answer @req from @peer in @rep (status, field, sentence and body), or say
 * what it waits for (then @rep is not to be sent).  For a successful CREATE,
 * @fds gets the descriptors to send (pages, control or -1), which stay the
 * store's: the caller sends them and closes nothing.  @behind_commit: the
 * request waited for a commit of its name, whose pages nobody wrote yet, so
 * an attach to them is not warm. */
struct store_wait store_handle(const struct mc_keeper_request *req, const struct keeper_peer *peer,
			       bool behind_commit, struct mc_keeper_reply *rep, int fds[2]);
/* The same, for a request that waited for the mapper scan @scan (its
 * store_wait.scan): the counts that scan took are fresh enough for it. */
struct store_wait store_handle_after_scan(const struct mc_keeper_request *req, const struct keeper_peer *peer,
					  uint64_t scan, struct mc_keeper_reply *rep, int fds[2]);
/* A mapper scan is done: take its counts, free what they let go (released
 * segments nobody maps, the idle timeout), and start the next scan when
 * one was asked for meanwhile.  The serial of the scan done, 0 when none
 * was: requests that wait for a scan up to it are to be handled again. */
uint64_t store_scan_done(void);
/* A committer thread finished @job: keep its segment (or drop the
 * reservation when the commit failed), free @job, and fill its creator's
 * reply in @rep and @fds (sequence left to the caller); the generation. */
uint64_t store_commit_done(struct commit_job *job, struct mc_keeper_reply *rep, int fds[2]);
/* The idle timeout: free what nobody mapped for config->idle_timeout_s;
 * a save put off that fell due.  Returns how long the loop may sleep
 * before the next look, -1 forever. */
int store_tick(void);

/* --- committing pages (commit.c) ------------------------------------------- */

struct kept_pages {
	int pages_fd;	     /* sealed memfd, committed, not mapped by the keeper */
	int control_fd;	     /* sealed, zero-filled memfd; -1 when control_bytes is 0 */
	uint64_t alloc_size; /* a multiple of page_size */
	uint64_t page_size;
};

/* The page size a CREATE of these fields gets (0 asks the backing's
 * default): 0 or a negative errno with @why. */
int commit_page_size(uint64_t requested, bool hugetlb, uint64_t *page_size, char *why, size_t why_size);
/* Allocate, commit and seal @alloc_size bytes (a multiple of @page_size) for
 * the kept segment @name, and its control area; the keeper's memory cgroup
 * pays, after the room check that create() runs.  0, or a negative errno
 * with @why (ENOMEM: no room, with the numbers). */
int commit_segment(const char *name, uint64_t alloc_size, uint64_t page_size, bool hugetlb,
		   uint64_t control_bytes, struct kept_pages *out, char *why, size_t why_size);
/* A fresh control area of @bytes for a group of the kept segment @name
 * (sealed against shrinking, growing and further seals, writable, zero),
 * named as the library names its own, with the kept pages' label and this
 * process as the owner, so that `list` finds a group's front.  0, or a
 * negative errno with @why. */
int commit_group_area(const char *name, uint64_t bytes, int *out, char *why, size_t why_size);

/* --- committer threads (committer.c) --------------------------------------- */

struct commit_job {
	/* Set before committer_submit(), read-only while it runs. */
	char name[MC_KEEPER_NAME_MAX + 1];
	uint64_t alloc_size, page_size, control_bytes;
	bool hugetlb;
	uint32_t account_uid; /* whose commits --uid-max-commits counts (its segment's account) */
	/* The committer thread's results, for the loop once it is done. */
	struct kept_pages pages;
	int err;
	char why[MC_KEEPER_TEXT_MAX + 1];
	/* The committer's own. */
	bool running;
	struct commit_job *next;
};

/* The eventfd the loop polls: readable when a job is done.  0 or a negative
 * errno, logged. */
int committer_start(const struct keeper_config *config);
int committer_fd(void);
/* Queue @job (the caller's until committer_take_done() gives it back); it
 * starts when fewer than --max-commits run, and fewer than
 * --uid-max-commits of its owner.  0, or a negative errno with @why. */
int committer_submit(struct commit_job *job, char *why, size_t why_size);
/* A finished job, or NULL when none is; reads the eventfd first. */
struct commit_job *committer_take_done(void);
/* At the stop: queued jobs are dropped; running ones are left to their
 * threads, which the process's exit ends (their half-made memfds go with
 * it: nothing of them was stored or saved). */
void committer_stop(void);

/* --- the mapper scanner (scanner.c) ----------------------------------------- */

/* One kept segment's pages as a scan looks for them, and what it found. */
struct scan_key {
	unsigned int major, minor;
	uint64_t ino;
	uint64_t generation; /* whose key: the segment may be gone when the scan is done */
	unsigned int group;  /* 0: the segment's pages; else its group control area in slot group - 1 */
	uint32_t mappers;    /* processes that map it */
	pid_t last_pid;	     /* count each process once, however many VMAs it has */
};

struct scan_job {
	/* Set before scanner_submit(), the thread's while it runs. */
	struct scan_key *keys; /* malloc'd; sorted by the thread */
	size_t count;
	uint64_t serial;
	uint64_t started_ns; /* CLOCK_MONOTONIC: what was handed out after it may be mapped unseen */
	/* The thread's results. */
	size_t unreadable; /* processes whose maps it could not read */
	bool blind;	   /* it could not read /proc at all */
};

/* The eventfd the loop polls: readable when a scan is done.  0 or a
 * negative errno, logged. */
int scanner_start(void);
int scanner_fd(void);
/* Run @job on a thread of its own (the caller's again from
 * scanner_take_done()); one at a time.  0 or a negative errno. */
int scanner_submit(struct scan_job *job);
/* The finished job, or NULL; reads the eventfd first. */
struct scan_job *scanner_take_done(void);
/* At the stop: a running scan is abandoned (its thread frees its job). */
void scanner_stop(void);

/* --- the service manager (service.c) --------------------------------------- */

/* Read LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES once, at start: the listening
 * socket systemd passed (-1 when none) and the stored descriptors, which
 * service_take() then hands out by name. */
int service_start(void);
/* The passed listening socket, or -1 (the keeper binds its own). */
int service_listen_fd(void);
/* The stored descriptor named @fdname, ownership passing to the caller;
 * -1 when none.  Descriptors nobody took are closed by service_ready(). */
int service_take(const char *fdname);
/* Whether descriptors stored now survive the keeper's restart (a service
 * manager with a descriptor store, and libsystemd in this build). */
bool service_can_store(void);
/* Keep @fd in the descriptor store as @fdname (it stays open here too);
 * remove the one stored as @fdname.  0 or a negative errno; without a store
 * both are 0 and do nothing. */
int service_store(const char *fdname, int fd);
int service_remove(const char *fdname);
/* READY=1 with a STATUS= line; STOPPING=1. */
void service_ready(const char *status);
void service_stopping(void);

/* --- the table's metadata (state.c) ---------------------------------------- */

/* Save every segment's record and the next generation where a restarted
 * keeper finds them (a memfd in the descriptor store, "state"); load them at
 * start, with each segment's descriptors taken from the store by
 * "pages-GENERATION" and "control-GENERATION". */
int state_save(const struct kept_segment *const *segments, size_t count, uint64_t next_generation);
int state_load(struct kept_segment **segments, size_t *count, uint64_t *next_generation);

#endif
