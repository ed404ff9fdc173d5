/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A program built against 0.1 or 0.2 keeps working with this library: its
 * options struct is shorter than 0.3's, and the versions it was linked
 * against (options_init@0.1, create@0.1, room@0.2, found here with dlvsym as
 * its dynamic linker would) read and write only those bytes, with the new
 * fields at their defaults.  The library is the built shared object, loaded
 * by its SONAME through LD_LIBRARY_PATH (make check sets it).
 */
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/segment.h>

/* The first 48 bytes of the 0.3 struct are 0.1's (lib/segment/options-compat.c). */
#define OLD_SIZE 48
#define CANARY	 0xa5

struct old_program {
	uint8_t options[OLD_SIZE];
	uint8_t after[64]; /* the old program's next variable */
};

static void *library;

static void *versioned(const char *name, const char *version)
{
	void *fn;

	if (!library)
		library = dlopen("libmooncake-segment.so.0", RTLD_NOW);
	ck_assert_msg(library, "dlopen: %s", dlerror());
	fn = dlvsym(library, name, version);
	ck_assert_msg(fn, "%s@%s is not exported: %s", name, version, dlerror());
	return fn;
}

START_TEST(test_old_options_init_writes_only_the_old_struct)
{
	void (*init)(void *) = versioned("mooncake_segment_options_init", "MOONCAKE_SEGMENT_0.1");
	struct mooncake_segment_options now;
	struct old_program p;

	memset(&p, CANARY, sizeof(p));
	init(p.options);
	for (size_t i = 0; i < sizeof(p.after); i++)
		ck_assert_msg(p.after[i] == CANARY, "options_init@0.1 wrote byte %zu past the old struct", i);
	mooncake_segment_options_init(&now);
	ck_assert_mem_eq(p.options, &now, OLD_SIZE);
}
END_TEST

START_TEST(test_old_create_and_room_read_only_the_old_struct)
{
	void (*init)(void *) = versioned("mooncake_segment_options_init", "MOONCAKE_SEGMENT_0.1");
	int (*create)(const char *, uint64_t, const void *, struct mooncake_segment **, void *) =
		versioned("mooncake_segment_create", "MOONCAKE_SEGMENT_0.1");
	int (*room)(const void *, uint64_t *) = versioned("mooncake_segment_room", "MOONCAKE_SEGMENT_0.2");
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct old_program p;
	uint64_t bytes = 0;

	memset(&p, 0xff, sizeof(p)); /* garbage where 0.3's fields would be */
	init(p.options);
	ck_assert_int_eq(room(p.options, &bytes), 0);
	ck_assert_uint_gt(bytes, 0);
	ck_assert_int_eq(create("old-program", 4 << 20, p.options, &seg, blob), 0);
	/* Read as 0.3 would, the garbage would ask for a background commit and a
	 * registration range without host_register (EINVAL): the defaults apply. */
	ck_assert_uint_eq(mooncake_segment_ready_bytes(seg), 4 << 20);
	ck_assert_int_eq(mooncake_segment_complete(seg, blob, sizeof(blob)), 0);
	mooncake_segment_destroy(seg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("abi");
	TCase *tc = tcase_create("0.1 programs");
	SRunner *runner;
	int failed;

	tcase_add_test(tc, test_old_options_init_writes_only_the_old_struct);
	tcase_add_test(tc, test_old_create_and_room_read_only_the_old_struct);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	if (library)
		dlclose(library);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
