/* SPDX-License-Identifier: Apache-2.0 */
/* The one reader of the environment: strict numbers with a named problem,
 * and empty values read as unset.  (That a privileged program ignores every
 * variable is shown by check-isolation, which runs one set-user-ID.) */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "internals.h"

#define VARIABLE "MOONCAKE_SEGMENT_TEST_NUMBER"

START_TEST(test_decimal_takes_digits_only)
{
	static const char *const refused[] = {
		"",	" 5", "+5",  "-5",	 "5 ",	"5,",
		"0x10", "5s", "1e3", "\xd9\xa3", "5\n", "18446744073709551616"
	};
	uint64_t v = 7;

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		ck_assert_msg(!mc_parse_decimal(refused[i], strlen(refused[i]), &v), "'%s' was taken",
			      refused[i]);
		ck_assert_uint_eq(v, 7);
	}
	ck_assert(mc_parse_decimal("0", 1, &v) && v == 0);
	ck_assert(mc_parse_decimal("18446744073709551615", 20, &v) && v == UINT64_MAX);
	/* Only the @len bytes given: the rest of a list is not this number's. */
	ck_assert(mc_parse_decimal("1000,1001", 4, &v) && v == 1000);
}
END_TEST

/* The message names the variable, the value, the problem, the range and the fix. */
static void expect_refused(const char *text, const char *problem)
{
	char why[256] = "";
	uint64_t v = 7;

	setenv(VARIABLE, text, 1);
	ck_assert_int_eq(mc_env_number(VARIABLE, 1, 3600000, 10000, &v, why, sizeof(why)), -EINVAL);
	ck_assert_uint_eq(v, 7);
	ck_assert_msg(strstr(why, VARIABLE "='") && strstr(why, text) && strstr(why, problem) &&
			      strstr(why, "from 1 to 3600000") &&
			      strstr(why, "fix or unset it (default 10000)"),
		      "%s", why);
	unsetenv(VARIABLE);
}

START_TEST(test_numbers_say_what_is_wrong)
{
	expect_refused("10s", "not a number");
	expect_refused(" 5", "not a number");
	expect_refused("+5", "not a number");
	expect_refused("5 ", "not a number");
	expect_refused("-5", "not a number");
	expect_refused("0", "too small");
	expect_refused("3600001", "too large");
	expect_refused("99999999999", "too large");
	expect_refused("99999999999999999999999", "too large");
}
END_TEST

START_TEST(test_unset_and_empty_take_the_default_and_limits_are_inclusive)
{
	char why[256];
	uint64_t v = 0;

	unsetenv(VARIABLE);
	ck_assert_int_eq(mc_env_number(VARIABLE, 1, 3600000, 10000, &v, why, sizeof(why)), 0);
	ck_assert_uint_eq(v, 10000);
	setenv(VARIABLE, "", 1);
	ck_assert_ptr_null(mc_env(VARIABLE));
	ck_assert_int_eq(mc_env_number(VARIABLE, 1, 3600000, 10000, &v, why, sizeof(why)), 0);
	ck_assert_uint_eq(v, 10000);
	setenv(VARIABLE, "1", 1);
	ck_assert_int_eq(mc_env_number(VARIABLE, 1, 3600000, 10000, &v, why, sizeof(why)), 0);
	ck_assert_uint_eq(v, 1);
	setenv(VARIABLE, "3600000", 1);
	ck_assert_int_eq(mc_env_number(VARIABLE, 1, 3600000, 10000, &v, why, sizeof(why)), 0);
	ck_assert_uint_eq(v, 3600000);
	unsetenv(VARIABLE);
}
END_TEST

Suite *suite_environment(void)
{
	Suite *s = suite_create("environment");
	TCase *tc = tcase_create("environment");

	tcase_add_test(tc, test_decimal_takes_digits_only);
	tcase_add_test(tc, test_numbers_say_what_is_wrong);
	tcase_add_test(tc, test_unset_and_empty_take_the_default_and_limits_are_inclusive);
	suite_add_tcase(s, tc);
	return s;
}
