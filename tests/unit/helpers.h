/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the check suites: resource counting, option shorthands, suites. */
#ifndef MOONCAKE_SEGMENT_TEST_HELPERS_H
#define MOONCAKE_SEGMENT_TEST_HELPERS_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>

#include <mooncake/segment.h>

/* Large enough to span many pages, small enough for a 2-core CI machine; a
 * multiple of 4 KiB but not of 2 MiB, so rounding is exercised. */
#define TEST_SIZE (UINT64_C(61) * (4096 + 8192))

/* Descriptors open in this process, and the library's mappings in it
 * (segment pages and address windows, which carry its name). */
int count_fds(void);
/* Descriptors of process @pid whose target starts with @prefix
 * ("/memfd:mooncake-segment:"); -1 when /proc/PID/fd is unreadable. */
int count_fds_to(int pid, const char *prefix);
/* Threads of this process. */
int count_tasks(void);
int count_mappings(void);
/* Running under ASan or valgrind, which map and use memory of their own. */
int under_memory_checker(void);

struct mooncake_segment_options test_options(uint32_t world, uint32_t rank, uint32_t owner);

/* Assert that a call failed with @err and left a message mentioning @needle. */
#define ck_assert_error(ret, err, needle)                                                          \
	do {                                                                                       \
		int ret_ = (ret);                                                                  \
		ck_assert_msg(ret_ == -(err), "expected -%s, got %d (%s)", #err, ret_,             \
			      mooncake_segment_last_error());                                      \
		ck_assert_msg(strstr(mooncake_segment_last_error(), (needle)) != NULL,             \
			      "message '%s' lacks '%s'", mooncake_segment_last_error(), (needle)); \
	} while (0)

/* In a forked rank (group.h): on a failed @cond, say which rank and why, and exit 1. */
#define RANK_CHECK(cond)                                                               \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "rank %u: %s failed: %s\n", self->rank, #cond, \
				mooncake_segment_last_error());                        \
			return 1;                                                      \
		}                                                                      \
	} while (0)

/* Fill @n bytes at @p with a pattern derived from @seed; check it. */
void fill_pattern(void *p, uint64_t n, uint32_t seed);
int check_pattern(const void *p, uint64_t n, uint32_t seed);

/* Wait until @pid is a zombie or gone; false after @timeout_ms. */
int wait_until_dead(int pid, int timeout_ms);
/* Wait until @pid is stopped (SIGSTOP, state T); false when it is gone or after @timeout_ms. */
int wait_until_stopped(int pid, int timeout_ms);

/* The whole of file @path (a fake runtime's call log) in @buf; "" when absent. */
const char *read_text(const char *path, char *buf, size_t size);
/* Lines of @text that start with @prefix. */
int count_lines(const char *text, const char *prefix);

/* The memory cgroup's charge batching, stated again from doc/guarantees.md:
 * 64 pages for each CPU this process may run on, which room() leaves out
 * under a cgroup limit and create's check does not. */
uint64_t memcg_charge_slack(void);

/* Fixture trees (fake sysfs, cgroupfs) under /tmp: create one into @root,
 * write @text to @root/@rel (making directories), remove it all. */
void fixture_tree_create(char *root, size_t size);
void fixture_put(const char *root, const char *rel, const char *text);
void fixture_tree_remove(const char *root);

/* Options for a host_register segment of rank @rank on accelerator @device. */
struct mooncake_segment_options host_register_options(uint32_t world, uint32_t rank, int device);

/* Point the library at the fake CUDA driver (FAKE_CUDA_LIBRARY, set by make
 * check) with @devices devices, its call log at a fresh per-process path
 * named after @tag and written into @log_path; no Ascend runtime. */
void use_fake_cuda_driver(const char *devices, const char *tag, char *log_path, size_t size);

/* The path of @file beside the fake CUDA driver (an older build of it). */
const char *fake_cuda_sibling(const char *file);

/* Point the library at the fake AscendCL runtime (FAKE_ASCEND_LIBRARY, set by
 * make check) with @devices devices and @current as this thread's device, its
 * call log at a fresh per-process path written into @log_path; no CUDA, so
 * Ascend is the runtime chosen. */
void use_fake_ascend_runtime(const char *devices, const char *current, char *log_path, size_t size);

/* Whether pidfd_getfd works here (valgrind 3.19 and kernels before 5.6: no). */
int pidfd_getfd_available(void);

Suite *suite_options(void);
Suite *suite_blob(void);
Suite *suite_fingerprint(void);
Suite *suite_sharing(void);
Suite *suite_complete(void);
Suite *suite_host(void);
Suite *suite_host_root(void);
Suite *suite_room(void);
Suite *suite_environment(void);
Suite *suite_placement(void);
Suite *suite_hardening(void);
Suite *suite_fork(void);
Suite *suite_commit_lock(void);
Suite *suite_limits(void);
Suite *suite_background(void);

#endif
