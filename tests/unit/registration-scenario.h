/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host-registration scenarios every accelerator runtime must pass, written
 * once (registration-scenario.c) and run by each runtime's suite
 * (check-cuda.c, check-ascend.c) against its fake; each suite keeps only
 * what is its runtime's own.
 */
#ifndef MOONCAKE_SEGMENT_TEST_REGISTRATION_SCENARIO_H
#define MOONCAKE_SEGMENT_TEST_REGISTRATION_SCENARIO_H

#include <check.h>
#include <stddef.h>

#include <mooncake/segment.h>

/* A fake runtime (tests/fakes) as the scenarios drive it.  Both fakes log
 * "register N len ...", "register N failed" and "unregister len ...", and
 * "ERROR ..." for any misuse. */
struct fake_runtime {
	const char *name;	       /* get_info()'s accelerator: "cuda" */
	const char *runtime;	       /* in the library's messages: "CUDA" */
	const char *fail_register_at;  /* the fake's variable that fails the Nth registration */
	int owner_device, peer_device; /* device_id of each rank */
	/* Point the library at the fake, with two devices and the calling
	 * thread on @device; its call log's path into @log. */
	void (*use)(int device, char *log, size_t size);
	/* Runtime-specific checks, or NULL: while the ranks are registered, and
	 * after both were destroyed (@log: the call log). */
	void (*check_registered)(struct mooncake_segment *owner, struct mooncake_segment *peer,
				 const char *log);
	void (*check_released)(const char *log);
	/* After a failed chunk and its rollback. */
	void (*check_rolled_back)(const char *log);
};

/* Add the scenarios to @tc, run against @runtime (which must outlive the run):
 * - an owner and a peer each register their own mapping (the owner at
 *   create, the peer at complete), report the runtime, and unregister at
 *   destroy before unmapping: nothing left mapped, no misuse logged;
 * - the third of four chunks fails: the error names it and the runtime, the
 *   two before it are unregistered after the failure, nothing leaks. */
void tcase_add_registration_scenarios(TCase *tc, const struct fake_runtime *runtime);

#endif
