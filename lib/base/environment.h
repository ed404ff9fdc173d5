/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The environment variables the library reads (environment.c), every one
 * through here: doc/environment.md lists them with their meaning, range and
 * who may set them.
 */
#ifndef MOONCAKE_SEGMENT_ENVIRONMENT_H
#define MOONCAKE_SEGMENT_ENVIRONMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The value of variable @name, NULL when it is unset or empty.  Read with
 * secure_getenv(): in a program that runs with privileges its user does not
 * have (set-user-ID, set-group-ID, file capabilities), every variable reads
 * as unset, so that the user cannot steer the library there. */
const char *mc_env(const char *name);

/* @len bytes of @text as an unsigned decimal number: digits only (no sign,
 * space or other byte), at least one; false on anything else or when the
 * value does not fit in 64 bits. */
bool mc_parse_decimal(const char *text, size_t len, uint64_t *value);

/* The number that variable @name holds, in [@min, @max]; @fallback when the
 * variable is unset or empty.  0, or -EINVAL with @why saying what is wrong
 * (not a number, too small, too large), the range, and the fix. */
int mc_env_number(const char *name, uint64_t min, uint64_t max, uint64_t fallback, uint64_t *value, char *why,
		  size_t why_size);

#endif
