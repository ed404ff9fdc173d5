/* SPDX-License-Identifier: Apache-2.0 */
/* One check runner for every white-box suite; CK_* environment variables apply. */
#include "config.h"

#include <stdlib.h>

#include "helpers.h"

int main(void)
{
	SRunner *runner = srunner_create(suite_options());
	int failed;

	srunner_add_suite(runner, suite_blob());
	srunner_add_suite(runner, suite_fingerprint());
	srunner_add_suite(runner, suite_host());
	srunner_add_suite(runner, suite_host_root());
	srunner_add_suite(runner, suite_sharing());
	srunner_add_suite(runner, suite_complete());
	srunner_add_suite(runner, suite_placement());
	srunner_add_suite(runner, suite_hardening());
	srunner_add_suite(runner, suite_fork());
	srunner_add_suite(runner, suite_commit_lock());
	srunner_add_suite(runner, suite_limits());
	srunner_add_suite(runner, suite_room());
	srunner_add_suite(runner, suite_environment());
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
