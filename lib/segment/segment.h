/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The segment object (segment.c) behind the public struct mooncake_segment:
 * what the state machine knows of the group, its memory as the backend
 * sees it (struct mc_memory, embedded), and this rank's registration.
 */
#ifndef MOONCAKE_SEGMENT_SEGMENT_H
#define MOONCAKE_SEGMENT_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "mooncake/segment.h"

struct mooncake_segment {
	const struct mc_backend_ops *backend;
	struct mooncake_segment_options opt;
	char label[64]; /* the name before '|', for messages and /proc/PID/maps */
	uint64_t size;
	uint64_t fingerprint;
	bool ready;
	bool finished;
	pid_t creator; /* the process that created it: only it releases anything */
	/* What the backend sees and fills; memory.opt and memory.label point
	 * into this object. */
	struct mc_memory memory;
	struct mc_registration registration; /* .ops set while registered */
	int32_t numa_node_requested;
};

/* The page size create() would use for @opt, or the error it would give. */
int mc_segment_page_size(const struct mooncake_segment_options *opt, uint64_t *page_size);

#endif
