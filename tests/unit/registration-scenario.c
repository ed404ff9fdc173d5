/* SPDX-License-Identifier: Apache-2.0 */
/* The host-registration scenarios every runtime must pass (registration-scenario.h). */
#include "config.h"

#include "registration-scenario.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)

/* The runtime of this run: Check runs each test in a forked child, which inherits it. */
static const struct fake_runtime *rt;

START_TEST(test_each_rank_registers_its_own_mapping)
{
	struct mooncake_segment_options o = host_register_options(2, 0, rt->owner_device),
					p = host_register_options(2, 1, rt->peer_device);
	struct mooncake_segment *owner, *peer;
	struct mooncake_segment_info info;
	uint8_t blobs[2 * BLOB];
	char log_path[64], log[8192];
	int maps;

	rt->use(rt->peer_device, log_path, sizeof(log_path));
	ck_assert(mooncake_segment_supported(true, true, false));
	maps = count_mappings();
	ck_assert_int_eq(mooncake_segment_create("registered", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("registered", SIZE, &p, &peer, blobs + BLOB), 0);
	/* The owner registered at create; the peer has nothing to register yet. */
	ck_assert_int_eq(count_lines(read_text(log_path, log, sizeof(log)), "register "), 1);
	ck_assert_uint_ne(mooncake_segment_device_addr(owner), 0);
	ck_assert_uint_eq(mooncake_segment_device_addr(peer), 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(count_lines(read_text(log_path, log, sizeof(log)), "register "), 2);
	ck_assert_uint_ne(mooncake_segment_device_addr(peer), 0);
	ck_assert_int_eq(mooncake_segment_get_info(peer, &info, sizeof(info)), 0);
	ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_REGISTERED);
	ck_assert_str_eq(info.accelerator, rt->name);
	if (rt->check_registered)
		rt->check_registered(owner, peer, log);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	read_text(log_path, log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "unregister "), 2);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	if (rt->check_released)
		rt->check_released(log);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

START_TEST(test_chunks_roll_back_on_failure)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, rt->owner_device);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	char log_path[64], log[8192], named[96];
	const char *failed, *unregisters;
	int fds, maps;

	rt->use(rt->owner_device, log_path, sizeof(log_path));
	setenv(rt->fail_register_at, "3", 1);
	opt.register_chunk_size = UINT64_C(2) << 20;
	ck_assert(mooncake_segment_supported(true, true, false)); /* loads the runtime before counting */
	fds = count_fds();
	maps = count_mappings();
	snprintf(named, sizeof(named), "%s host registration of chunk 3 of 4", rt->runtime);
	ck_assert_error(mooncake_segment_create("rolled-back", SIZE, &opt, &seg, blob), ENOMEM, named);
	ck_assert_ptr_null(seg);
	read_text(log_path, log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "register "), 3);
	ck_assert_int_eq(count_lines(log, "unregister "), 2);
	/* The rollback follows the failure. */
	failed = strstr(log, "register 3 failed");
	unregisters = strstr(log, "unregister ");
	ck_assert_ptr_nonnull(failed);
	ck_assert_ptr_nonnull(unregisters);
	ck_assert(failed < unregisters);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	if (rt->check_rolled_back)
		rt->check_rolled_back(log);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

/* The "register" lines of @log: their addresses, lengths and resident pages. */
struct register_call {
	uintptr_t addr;
	unsigned long len, mapped, pages;
};

static int register_calls(const char *log, struct register_call *calls, int max)
{
	int n = 0;

	for (const char *line = log; line && *line && n < max;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *at = strstr(line, " at "), *end = strchr(line, '\n');
		void *p;

		if (strncmp(line, "register ", 9) != 0 || !at || (end && at > end) || strstr(line, "failed"))
			continue;
		if (sscanf(at, " at %p mapped %lu of %lu", &p, &calls[n].mapped, &calls[n].pages) == 3) {
			calls[n].addr = (uintptr_t)p;
			calls[n].len = calls[n].pages * 4096;
			n++;
		}
	}
	return n;
}

/* A rank's chunks of [base + begin, base + end), in order; the owner's
 * each once committed (the owner's commit maps its pages as it goes, a
 * peer's mapping is empty until touched: @committed_means_mapped). */
static void check_registered_in_order(const struct register_call *calls, int n, const uint8_t *base,
				      uint64_t begin, uint64_t end, uint64_t chunk,
				      bool committed_means_mapped)
{
	uintptr_t next = (uintptr_t)base + begin;
	int seen = 0;

	for (int i = 0; i < n; i++) {
		if (calls[i].addr < (uintptr_t)base || calls[i].addr >= (uintptr_t)base + end)
			continue;
		ck_assert_msg(calls[i].addr == next, "chunk %d of this rank at +%llu, expected +%llu", seen,
			      (unsigned long long)(calls[i].addr - (uintptr_t)base),
			      (unsigned long long)(next - (uintptr_t)base));
		ck_assert_msg(!committed_means_mapped || calls[i].mapped == calls[i].pages,
			      "chunk at +%llu registered with %lu of its %lu pages committed",
			      (unsigned long long)(calls[i].addr - (uintptr_t)base), calls[i].mapped,
			      calls[i].pages);
		next += calls[i].len;
		seen++;
	}
	ck_assert_uint_eq(next, (uintptr_t)base + end);
	ck_assert_int_eq(seen, (int)((end - begin + chunk - 1) / chunk));
}

#define FRONT_SIZE  (UINT64_C(96) << 20)
#define FRONT_CHUNK (UINT64_C(8) << 20)
#define FRONT_CALLS 64

/* With background_commit both ranks register behind the owner's front, a
 * chunk at a time, each chunk after it is committed, in order; the peer only
 * [32 MiB, 64 MiB) (a rank that registers what it touches). */
START_TEST(test_registration_follows_the_front)
{
	struct mooncake_segment_options o = host_register_options(2, 0, rt->owner_device),
					p = host_register_options(2, 1, rt->peer_device);
	struct mooncake_segment *owner, *peer;
	struct register_call calls[FRONT_CALLS];
	uint8_t blobs[2 * BLOB];
	char log_path[64], log[16384];
	int n, maps;

	rt->use(rt->peer_device, log_path, sizeof(log_path));
	o.background_commit = p.background_commit = true;
	o.register_chunk_size = p.register_chunk_size = FRONT_CHUNK;
	o.commit_threads = 1;
	p.register_offset = UINT64_C(32) << 20;
	p.register_length = UINT64_C(32) << 20;
	ck_assert(mooncake_segment_supported(true, true, false));
	maps = count_mappings();
	ck_assert_int_eq(mooncake_segment_create("behind", FRONT_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("behind", FRONT_SIZE, &p, &peer, blobs + BLOB), 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_wait_ready(owner, 0, 0, -1), 0);
	ck_assert_int_eq(mooncake_segment_wait_ready(peer, 0, 0, -1), 0);
	ck_assert_uint_eq(mooncake_segment_ready_bytes(owner), FRONT_SIZE);
	ck_assert_uint_eq(mooncake_segment_ready_bytes(peer), FRONT_SIZE);
	ck_assert_uint_ne(mooncake_segment_device_addr(peer), 0);
	n = register_calls(read_text(log_path, log, sizeof(log)), calls, FRONT_CALLS);
	ck_assert_int_eq(n, 12 + 4);
	check_registered_in_order(calls, n, mooncake_segment_base(owner), 0, FRONT_SIZE, FRONT_CHUNK, true);
	check_registered_in_order(calls, n, mooncake_segment_base(peer), UINT64_C(32) << 20,
				  UINT64_C(64) << 20, FRONT_CHUNK, false);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	read_text(log_path, log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "unregister "), 16);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

/* By default a background registration is one call over each rank's whole
 * range, once the front has passed it: a copy whose host range crosses from
 * one registration into the next fails on a real GPU (invalid argument,
 * tests/gpu/straddle_check.py), so no default may split it. */
START_TEST(test_background_registration_is_one_call_by_default)
{
	struct mooncake_segment_options o = host_register_options(2, 0, rt->owner_device),
					p = host_register_options(2, 1, rt->peer_device);
	struct mooncake_segment *owner, *peer;
	struct register_call calls[FRONT_CALLS];
	uint8_t blobs[2 * BLOB];
	char log_path[64], log[16384];
	int n;

	rt->use(rt->peer_device, log_path, sizeof(log_path));
	o.background_commit = p.background_commit = true;
	o.commit_threads = 1;
	ck_assert_int_eq(mooncake_segment_create("one-call", FRONT_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("one-call", FRONT_SIZE, &p, &peer, blobs + BLOB), 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_wait_ready(owner, 0, 0, -1), 0);
	ck_assert_int_eq(mooncake_segment_wait_ready(peer, 0, 0, -1), 0);
	n = register_calls(read_text(log_path, log, sizeof(log)), calls, FRONT_CALLS);
	ck_assert_int_eq(n, 2);
	check_registered_in_order(calls, n, mooncake_segment_base(owner), 0, FRONT_SIZE, FRONT_SIZE, true);
	check_registered_in_order(calls, n, mooncake_segment_base(peer), 0, FRONT_SIZE, FRONT_SIZE, false);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

/* A chunk that fails in the background is that rank's error, from its
 * wait_ready, and nothing of its stays registered; the pages stay usable. */
START_TEST(test_background_registration_failure_is_the_ranks_error)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, rt->owner_device);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB], *base;
	char log_path[64], log[8192], named[96];

	rt->use(rt->owner_device, log_path, sizeof(log_path));
	setenv(rt->fail_register_at, "3", 1);
	opt.background_commit = true;
	opt.register_chunk_size = UINT64_C(2) << 20;
	ck_assert_int_eq(mooncake_segment_create("behind-fails", SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_complete(seg, blob, sizeof(blob)), 0);
	snprintf(named, sizeof(named), "%s host registration of chunk 3 of 4", rt->runtime);
	ck_assert_error(mooncake_segment_wait_ready(seg, 0, 0, -1), ENOMEM, named);
	ck_assert_error(mooncake_segment_wait_ready(seg, SIZE - 1, 1, 0), ENOMEM, named);
	/* Chunks 1 and 2 were registered, then rolled back: no device address is left. */
	ck_assert_uint_eq(mooncake_segment_device_addr(seg), 0);
	base = mooncake_segment_base(seg);
	base[SIZE - 1] = 7; /* the CPU's pages all the same */
	ck_assert_uint_eq(base[SIZE - 1], 7);
	mooncake_segment_destroy(seg);
	read_text(log_path, log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "unregister "), 2);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	unsetenv(rt->fail_register_at);
}
END_TEST

void tcase_add_registration_scenarios(TCase *tc, const struct fake_runtime *runtime)
{
	rt = runtime;
	tcase_add_test(tc, test_each_rank_registers_its_own_mapping);
	tcase_add_test(tc, test_chunks_roll_back_on_failure);
	tcase_add_test(tc, test_registration_follows_the_front);
	tcase_add_test(tc, test_background_registration_is_one_call_by_default);
	tcase_add_test(tc, test_background_registration_failure_is_the_ranks_error);
}
