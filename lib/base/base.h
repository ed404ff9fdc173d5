/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every file of the library uses: the export macro, the printf
 * attribute and a few arithmetic helpers.  No symbol of its own.
 */
#ifndef MOONCAKE_SEGMENT_BASE_H
#define MOONCAKE_SEGMENT_BASE_H

#include <stdbool.h>
#include <stdint.h>

/* Only definitions marked MC_EXPORT leave the library (with the version script). */
#define MC_EXPORT __attribute__((visibility("default")))

#define MC_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

#define MC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline uint64_t mc_align_up(uint64_t value, uint64_t align)
{
	return (value + align - 1) / align * align;
}

static inline bool mc_is_power_of_two(uint64_t value)
{
	return value && !(value & (value - 1));
}

#endif
