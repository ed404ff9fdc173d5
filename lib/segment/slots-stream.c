/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Publish slots in accelerator stream order (the declaration's slot_count
 * with host_register): each rank registers the control area's mapping with
 * its device as it does the pages, so that every slot sequence has a device
 * address on every rank.  A writer then publishes after its device-to-host
 * copy without a host sync (the runtime's stream write, behind a
 * system-scope fence, then a host function that wakes the CPU waiters), and
 * a reader's stream waits for a sequence on the device (the runtime's stream
 * wait), so the copy behind it starts only once the block is there.
 *
 * The value a stream publish stores is chosen when it is queued: 2 past the
 * larger of the slot's sequence and the last value this rank queued for it,
 * so that publishes queued back to back still grow.  That makes a slot
 * published in stream order a one-writer slot: the CPU's publish and seqlock
 * pair on it, or stream publishes by a second rank, may reuse a value
 * (slots.c's own functions stay correct among themselves).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/error.h"
#include "mooncake/segment.h"
#include "control.h"
#include "private.h"
#include "segment.h"

int mc_slots_register_words(struct mooncake_segment *seg)
{
	struct mc_registration reg = {
		.ops = mc_accel_for_host_register(),
		.device = seg->opt.device_id,
		.addr = seg->control.area,
		.len = seg->control.size, /* whole pages: the area is mapped on its own */
		.chunk = seg->control.size,
	};
	int err;

	if (!seg->opt.slot_count || !seg->opt.host_register || !seg->control.area)
		return 0;
	if (!reg.ops)
		return mc_error(ENOTSUP,
				"Shared segment host_register=true: the accelerator runtime went away");
	seg->stream_next = calloc(seg->opt.slot_count, sizeof(*seg->stream_next));
	if (!seg->stream_next)
		return mc_error(ENOMEM, "Shared segment slots: out of memory");
	err = reg.ops->register_host(&reg); /* its message names the runtime and the cause */
	if (err) {
		free(seg->stream_next);
		seg->stream_next = NULL;
		return err;
	}
	seg->slot_registration = reg;
	return 0;
}

void mc_slots_unregister_words(struct mooncake_segment *seg)
{
	if (seg->slot_registration.ops)
		seg->slot_registration.ops->unregister_host(&seg->slot_registration);
	seg->slot_registration.ops = NULL;
	free(seg->stream_next);
	seg->stream_next = NULL;
}

/* The registration the stream calls use, or NULL with *@err set. */
static const struct mc_registration *stream_slots(const struct mooncake_segment *seg, uint32_t slot, int *err)
{
	const struct mc_accel_ops *ops;
	const char *why;

	if (!mc_slot_get(seg, slot, err))
		return NULL;
	ops = seg->slot_registration.ops;
	if (!ops) {
		*err = mc_error(ENOTSUP,
				"Shared segment '%s': publish slots in stream order need host_register=true "
				"(each rank registers the slot words with its device)",
				seg->label);
		return NULL;
	}
	why = ops->stream_why_unavailable ? ops->stream_why_unavailable() : "no stream memory operations";
	if (!ops->stream_write || *why) {
		*err = mc_error(ENOTSUP,
				"Shared segment publish slots in stream order: the %s runtime cannot (%s)",
				ops->name, why);
		return NULL;
	}
	*err = 0;
	return &seg->slot_registration;
}

static uint64_t device_word(const struct mooncake_segment *seg, uint32_t slot)
{
	uintptr_t offset =
		(uintptr_t)&mc_control_slot(seg->control.area, slot)->seq - (uintptr_t)seg->control.area;

	return seg->slot_registration.device_addr + offset;
}

/* a is later than b, wrap-aware (the sequences are 64-bit counters). */
static bool later(uint64_t a, uint64_t b)
{
	return (int64_t)(a - b) > 0;
}

/* The next value to publish @slot with on a stream, reserved for this call. */
static uint64_t reserve_stream_value(struct mooncake_segment *seg, uint32_t slot)
{
	uint64_t *queued = &seg->stream_next[slot];
	uint64_t shared = __atomic_load_n(&mc_control_slot(seg->control.area, slot)->seq, __ATOMIC_ACQUIRE);
	uint64_t last = __atomic_load_n(queued, __ATOMIC_RELAXED), next;

	do {
		uint64_t base = later(shared, last) ? shared : last;

		next = (base | 1) + 1; /* the even value after base */
	} while (!__atomic_compare_exchange_n(queued, &last, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return next;
}

/* On a host thread of the runtime, after the stream's store: wake the CPU
 * waiters of the word.  Only a futex call on the address, never a load or
 * store: the segment may be gone by now, and then the call fails with
 * EFAULT (or wakes nobody) instead of touching memory. */
static void wake_host_waiters(void *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

MC_EXPORT int64_t mooncake_segment_publish_on_stream(struct mooncake_segment *seg, uint32_t slot,
						     void *stream, unsigned int flags)
{
	char why[160] = "";
	int err;
	const struct mc_registration *reg = stream_slots(seg, slot, &err);
	uint64_t value;
	bool wake;

	if (!reg)
		return err;
	if (flags & ~(unsigned int)MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE)
		return mc_error(EINVAL, "Shared segment publish on a stream: unknown flags 0x%x", flags);
	wake = !(flags & MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE);
	value = reserve_stream_value(seg, slot);
	err = reg->ops->stream_write(reg, stream, device_word(seg, slot), value,
				     wake ? wake_host_waiters : NULL,
				     &mc_control_slot(seg->control.area, slot)->seq, why, sizeof(why));
	if (err)
		return mc_error(-err, "Shared segment slot %u: %s cannot publish on the stream: %s", slot,
				reg->ops->name, why);
	return (int64_t)value;
}

MC_EXPORT int64_t mooncake_segment_wait_slot_on_stream(struct mooncake_segment *seg, uint32_t slot,
						       uint64_t seen, void *stream)
{
	char why[160] = "";
	int err;
	const struct mc_registration *reg = stream_slots(seg, slot, &err);
	uint64_t target = (seen | 1) + 1; /* the first published (even) sequence past @seen */

	if (!reg)
		return err;
	err = reg->ops->stream_wait(reg, stream, device_word(seg, slot), target, why, sizeof(why));
	if (err)
		return mc_error(-err, "Shared segment slot %u: %s cannot wait on the stream: %s", slot,
				reg->ops->name, why);
	return (int64_t)target;
}

MC_EXPORT int mooncake_segment_slot_device_words(const struct mooncake_segment *seg, uint64_t *device_addr,
						 size_t *stride)
{
	int err;

	if (!device_addr || !stride)
		return mc_error(
			EINVAL,
			"Shared segment slot device words need somewhere to put the address and stride");
	/* The words have addresses once registered, stream operations or not. */
	if (!stream_slots(seg, 0, &err) && (err != -ENOTSUP || !seg->slot_registration.ops))
		return err;
	*device_addr = device_word(seg, 0);
	*stride = sizeof(struct mc_control_slot);
	return 0;
}
