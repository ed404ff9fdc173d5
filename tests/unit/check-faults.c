/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fault injection against the installed-shape library: each system call the
 * library depends on fails in turn, and create/complete return the
 * documented errno with a message and leak no descriptor or mapping.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fault.h"
#include "helpers.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

/* An owner create with @call failing must return -@expected and leave nothing behind. */
static void expect_owner_fails(enum fault_call call, int nth, int count, int err, int filter, int expected,
			       const char *needle)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	int fds = count_fds(), maps = count_mappings();

	fault_inject(call, nth, count, err, filter);
	ck_assert_error(mooncake_segment_create("faulty", TEST_SIZE, &opt, &seg, blob), expected, needle);
	ck_assert_int_ge(fault_hits(call), 1);
	fault_clear();
	ck_assert_ptr_null(seg);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}

/* The owner makes its control area first (memfd, size, seals, mapping),
 * then the pages' memfd, window and mapping. */
START_TEST(test_memfd_create_failures)
{
	expect_owner_fails(FAULT_MEMFD_CREATE, 1, 1, EMFILE, -1, EMFILE,
			   "memfd_create for its control area failed");
	expect_owner_fails(FAULT_MEMFD_CREATE, 1, 1, EPERM, -1, EPERM, "seccomp");
	expect_owner_fails(FAULT_MEMFD_CREATE, 2, 1, EMFILE, -1, EMFILE, "memfd_create failed");
	expect_owner_fails(FAULT_MEMFD_CREATE, 2, 1, ENFILE, -1, EMFILE, "memfd_create failed");
	expect_owner_fails(FAULT_MEMFD_CREATE, 2, 1, ENOMEM, -1, ENOMEM, "memfd_create failed");
	expect_owner_fails(FAULT_MEMFD_CREATE, 2, 1, EPERM, -1, EPERM, "seccomp");
}
END_TEST

START_TEST(test_ftruncate_and_seal_failures)
{
	expect_owner_fails(FAULT_FTRUNCATE, 1, 1, ENOMEM, -1, ENOMEM, "size and seal its control area");
	expect_owner_fails(FAULT_FCNTL, 1, 1, EBUSY, F_ADD_SEALS, EIO, "size and seal its control area");
	expect_owner_fails(FAULT_FTRUNCATE, 2, 1, ENOMEM, -1, ENOMEM, "ftruncate");
	expect_owner_fails(FAULT_FTRUNCATE, 2, 1, EIO, -1, EIO, "ftruncate");
	expect_owner_fails(FAULT_FCNTL, 2, 1, EBUSY, F_ADD_SEALS, EIO, "seal");
}
END_TEST

START_TEST(test_mmap_failures)
{
	/* The control area's mapping, the address window (whose aligned and
	 * plain attempts both fail), then the shared mapping over it. */
	expect_owner_fails(FAULT_MMAP, 1, 1, ENOMEM, -1, ENOMEM, "map its control area");
	expect_owner_fails(FAULT_MMAP, 2, -1, ENOMEM, -1, ENOMEM, "address space");
	expect_owner_fails(FAULT_MMAP, 3, 1, ENOMEM, -1, ENOMEM, "mmap of");
}
END_TEST

START_TEST(test_commit_failures_are_clean_errors)
{
	expect_owner_fails(FAULT_FALLOCATE, 1, 1, ENOSPC, -1, ENOSPC, "cannot commit");
	expect_owner_fails(FAULT_FALLOCATE, 1, 1, ENOMEM, -1, ENOMEM, "cannot commit");
	expect_owner_fails(FAULT_MADVISE, 1, 1, EFAULT, MADV_POPULATE_WRITE, ENOMEM, "MADV_POPULATE_WRITE");
	expect_owner_fails(FAULT_MADVISE, 1, 1, ENOMEM, MADV_POPULATE_WRITE, ENOMEM, "MADV_POPULATE_WRITE");
}
END_TEST

/* Create with @call failing persistently; the owner must still commit, by @method. */
static void expect_fallback(enum fault_call call, int err, int filter, const char *method)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	struct mooncake_segment_info info;

	fault_inject(call, 1, -1, err, filter);
	ck_assert_int_eq(mooncake_segment_create("fallback", TEST_SIZE, &opt, &seg, blob), 0);
	ck_assert_int_ge(fault_hits(call), 1);
	fault_clear();
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_str_eq(info.commit_method, method);
	ck_assert_uint_eq(info.resident_bytes, info.alloc_size);
	mooncake_segment_destroy(seg);
}

START_TEST(test_old_kernel_without_populate_write_touches_instead)
{
	expect_fallback(FAULT_MADVISE, EINVAL, MADV_POPULATE_WRITE, "fallocate+touch");
}
END_TEST

START_TEST(test_filesystem_without_fallocate_populates_instead)
{
	expect_fallback(FAULT_FALLOCATE, EOPNOTSUPP, -1, "populate");
}
END_TEST

/* Owner and peer in this process; the peer's complete fails with @call/@err. */
static void expect_import_fails(enum fault_call call, int nth, int err, int expected, const char *needle)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;
	int fds, maps;

	ck_assert_int_eq(mooncake_segment_create("import", TEST_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("import", TEST_SIZE, &p, &peer, blobs + sizeof(blob)), 0);
	fds = count_fds();
	maps = count_mappings();
	fault_inject(call, nth, 1, err, -1);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), expected, needle);
	ck_assert_int_ge(fault_hits(call), 1);
	fault_clear();
	ck_assert(!mooncake_segment_ready(peer));
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
	/* Nothing half-done remains: the retry works. */
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}

START_TEST(test_import_mmap_failure_leaves_nothing_mapped)
{
	expect_import_fails(FAULT_MMAP, 1, ENOMEM, ENOMEM, "cannot map");
}
END_TEST

/* The owner's socket out of reach (as after a failed listen): /proc and pidfd_getfd remain. */
static void without_the_socket_route(void)
{
	fault_inject(FAULT_CONNECT, 1, -1, ECONNREFUSED, -1);
}

START_TEST(test_import_open_failure_other_than_permission)
{
	without_the_socket_route();
	expect_import_fails(FAULT_OPEN, 1, EMFILE, EMFILE, "open /proc/");
}
END_TEST

/* An LSM or seccomp that refuses the connect: the peer goes on to /proc. */
START_TEST(test_socket_route_refused_falls_back_to_proc)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;

	ck_assert_int_eq(mooncake_segment_create("connect", TEST_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("connect", TEST_SIZE, &p, &peer, blobs + sizeof(blob)), 0);
	fault_inject(FAULT_CONNECT, 1, 1, EACCES, -1);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(fault_hits(FAULT_CONNECT), 1);
	fault_clear();
	((uint8_t *)mooncake_segment_base(owner))[100] = 8;
	ck_assert_uint_eq(((uint8_t *)mooncake_segment_base(peer))[100], 8);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

START_TEST(test_proc_route_refused_falls_back_to_pidfd_getfd)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;

	ck_assert_int_eq(mooncake_segment_create("pidfd", TEST_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("pidfd", TEST_SIZE, &p, &peer, blobs + sizeof(blob)), 0);
	without_the_socket_route();
	fault_inject(FAULT_OPEN, 1, 1, EACCES, -1);
	if (!pidfd_getfd_available()) {
		/* No second route: the error must say so and name the cause. */
		ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EACCES,
				"pidfd_getfd: not available");
		ck_assert_msg(strstr(mooncake_segment_last_error(), "Likely cause"), "%s",
			      mooncake_segment_last_error());
		fault_clear();
		without_the_socket_route();
		ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
		fault_clear();
	} else {
		ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
		ck_assert_int_eq(fault_hits(FAULT_OPEN), 1);
		fault_clear();
	}
	((uint8_t *)mooncake_segment_base(owner))[100] = 7;
	ck_assert_uint_eq(((uint8_t *)mooncake_segment_base(peer))[100], 7);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

START_TEST(test_peer_reserve_failure)
{
	struct mooncake_segment_options opt = test_options(2, 1, 0);
	struct mooncake_segment *seg = NULL;
	int fds = count_fds(), maps = count_mappings();

	fault_inject(FAULT_MMAP, 1, -1, ENOMEM, -1);
	ck_assert_error(mooncake_segment_create("reserve", TEST_SIZE, &opt, &seg, blob), ENOMEM,
			"address space");
	fault_clear();
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

static void count_warnings(int priority, const char *message, void *userdata)
{
	if (priority == MOONCAKE_SEGMENT_LOG_WARNING && strstr(message, "CAP_SYS_NICE"))
		(*(int *)userdata)++;
}

START_TEST(test_mbind_refused_by_seccomp_degrades_with_a_warning)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg = NULL;
	int warnings = 0;

	opt.numa_node = 0;
	mooncake_segment_set_log_fn(count_warnings, MOONCAKE_SEGMENT_LOG_WARNING, &warnings);
	fault_inject(FAULT_MBIND, 1, -1, EPERM, -1);
	ck_assert_int_eq(mooncake_segment_create("numa", TEST_SIZE, &opt, &seg, blob), 0);
	ck_assert_int_ge(fault_hits(FAULT_MBIND), 1);
	fault_clear();
	mooncake_segment_set_log_fn(NULL, 0, NULL);
	ck_assert_int_eq(warnings, 1);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED);
	ck_assert_uint_eq(info.resident_bytes, info.alloc_size); /* committed all the same */
	mooncake_segment_destroy(seg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("faults");
	TCase *owner = tcase_create("owner");
	TCase *peer = tcase_create("peer");
	SRunner *runner;
	int failed;

	tcase_add_test(owner, test_memfd_create_failures);
	tcase_add_test(owner, test_ftruncate_and_seal_failures);
	tcase_add_test(owner, test_mmap_failures);
	tcase_add_test(owner, test_commit_failures_are_clean_errors);
	tcase_add_test(owner, test_old_kernel_without_populate_write_touches_instead);
	tcase_add_test(owner, test_filesystem_without_fallocate_populates_instead);
	tcase_add_test(owner, test_mbind_refused_by_seccomp_degrades_with_a_warning);
	tcase_add_test(peer, test_import_mmap_failure_leaves_nothing_mapped);
	tcase_add_test(peer, test_import_open_failure_other_than_permission);
	tcase_add_test(peer, test_proc_route_refused_falls_back_to_pidfd_getfd);
	tcase_add_test(peer, test_socket_route_refused_falls_back_to_proc);
	tcase_add_test(peer, test_peer_reserve_failure);
	suite_add_tcase(s, owner);
	suite_add_tcase(s, peer);
	runner = srunner_create(s);
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
