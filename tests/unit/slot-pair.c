/* SPDX-License-Identifier: Apache-2.0 */
/* The stream-order slot suites' pair of ranks and threads (slot-pair.h). */
#include "config.h"

#include <time.h>

#include "helpers.h"
#include "slot-pair.h"

struct slot_pair slot_pair_make(int owner_device, int peer_device, bool host_register)
{
	struct mooncake_segment_options o = host_register_options(2, 0, owner_device),
					p = host_register_options(2, 1, peer_device);
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct slot_pair g;

	o.slot_count = p.slot_count = SLOT_PAIR_SLOTS;
	o.host_register = p.host_register = host_register;
	ck_assert_int_eq(mooncake_segment_create("stream-slots", SLOT_PAIR_SIZE, &o, &g.owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("stream-slots", SLOT_PAIR_SIZE, &p, &g.peer,
						 blobs + MOONCAKE_SEGMENT_BLOB_SIZE),
			 0);
	ck_assert_int_eq(mooncake_segment_complete(g.owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(g.peer, blobs, sizeof(blobs)), 0);
	return g;
}

void slot_pair_destroy(struct slot_pair *g)
{
	mooncake_segment_destroy(g->peer);
	mooncake_segment_destroy(g->owner);
}

void *publish_later(void *delayed_publish)
{
	struct delayed_publish *d = delayed_publish;
	struct timespec pause = { 0, 50 * 1000 * 1000 };

	nanosleep(&pause, NULL);
	d->result = d->on_stream ? mooncake_segment_publish_on_stream(d->seg, d->slot, (void *)0x77, 0)
				 : mooncake_segment_publish(d->seg, d->slot);
	return NULL;
}

void *wait_on_stream(void *stream_wait)
{
	struct stream_wait *w = stream_wait;

	w->result = mooncake_segment_wait_slot_on_stream(w->seg, w->slot, w->seen, (void *)0x88);
	return NULL;
}
