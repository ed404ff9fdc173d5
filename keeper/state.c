/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table's metadata for a restarted keeper (keeper.h).  STUB until the
 * descriptor store lands: nothing is saved, nothing is found at start.
 */
#include "config.h"

#include <stddef.h>

#include "keeper.h"

int state_save(const struct kept_segment *const *segments, size_t count, uint64_t next_generation)
{
	(void)segments;
	(void)count;
	(void)next_generation;
	return 0;
}

int state_load(struct kept_segment **segments, size_t *count, uint64_t *next_generation)
{
	*segments = NULL;
	*count = 0;
	*next_generation = 1;
	return 0;
}
