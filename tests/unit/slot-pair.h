/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the stream-order slot suites share (check-cuda-slots.c,
 * check-ascend-slots.c): an owner and a peer of one group in this process,
 * with SLOT_PAIR_SLOTS slots, and the threads that publish later or wait on
 * a stream, so that a test can watch one side block until the other acts.
 */
#ifndef MOONCAKE_SEGMENT_TEST_SLOT_PAIR_H
#define MOONCAKE_SEGMENT_TEST_SLOT_PAIR_H

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/segment.h"

#define SLOT_PAIR_SIZE	(UINT64_C(4) << 20)
#define SLOT_PAIR_SLOTS 4

struct slot_pair {
	struct mooncake_segment *owner, *peer;
};

/* Owner (rank 0, on @owner_device) and peer (rank 1, on @peer_device),
 * created and completed, host_register as asked; a failure fails the test. */
struct slot_pair slot_pair_make(int owner_device, int peer_device, bool host_register);
void slot_pair_destroy(struct slot_pair *g);

/* publish_later(): 50 ms on, publish @slot of @seg (on stream 0x77 when
 * @on_stream) into @result. */
struct delayed_publish {
	struct mooncake_segment *seg;
	uint32_t slot;
	bool on_stream;
	int64_t result;
};
void *publish_later(void *delayed_publish);

/* wait_on_stream(): wait_slot_on_stream(@seg, @slot, @seen) on stream 0x88
 * into @result (a fake runtime's stream waits in the call). */
struct stream_wait {
	struct mooncake_segment *seg;
	uint32_t slot;
	uint64_t seen;
	int64_t result;
};
void *wait_on_stream(void *stream_wait);

#endif
