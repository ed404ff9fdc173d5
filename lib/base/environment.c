/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the environment.  One reader, so that no variable is obeyed in a
 * privileged program (secure_getenv) and every number is parsed the same
 * strict way: digits only, an explicit range, and an error that says which
 * of "not a number", "too small" or "too large" it is.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "environment.h"

const char *mc_env(const char *name)
{
	const char *value = secure_getenv(name);

	return value && *value ? value : NULL;
}

bool mc_parse_decimal(const char *text, size_t len, uint64_t *value)
{
	uint64_t v = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned int digit = (unsigned char)text[i] - '0';

		if (digit > 9 || v > (UINT64_MAX - digit) / 10)
			return false;
		v = v * 10 + digit;
	}
	*value = v;
	return true;
}

/* Only digits, but more of them than 64 bits hold. */
static bool all_digits(const char *text)
{
	return *text && strspn(text, "0123456789") == strlen(text);
}

int mc_env_number(const char *name, uint64_t min, uint64_t max, uint64_t fallback, uint64_t *value, char *why,
		  size_t why_size)
{
	const char *text = mc_env(name);
	const char *problem = NULL;
	uint64_t v = 0;

	if (!text) {
		*value = fallback;
		return 0;
	}
	if (!mc_parse_decimal(text, strlen(text), &v))
		problem =
			all_digits(text) ? "too large" : "not a number (digits only: no sign, space or unit)";
	else if (v < min)
		problem = "too small";
	else if (v > max)
		problem = "too large";
	if (!problem) {
		*value = v;
		return 0;
	}
	snprintf(why, why_size,
		 "%s='%s' is %s: it takes a whole number from %llu to %llu; fix or unset it (default %llu)",
		 name, text, problem, (unsigned long long)min, (unsigned long long)max,
		 (unsigned long long)fallback);
	return -EINVAL;
}
