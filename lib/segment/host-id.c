/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_host_id(): the host as complete() tells hosts apart, for
 * a caller whose group spans hosts and must form one group per host (the
 * Python binding does).  The same reader as the blob's boot id, under the
 * one host root (host/procfs.h).
 */
#include "config.h"

#include <string.h>

#include "base/base.h"
#include "host/host.h"
#include "mooncake/segment.h"

MC_EXPORT bool mooncake_segment_host_id(uint8_t id[MOONCAKE_SEGMENT_HOST_ID_SIZE])
{
	_Static_assert(MOONCAKE_SEGMENT_HOST_ID_SIZE == MC_BOOT_ID_SIZE, "the host id is the boot id");
	if (!id)
		return false;
	if (mc_host_boot_id(id))
		return true;
	memset(id, 0, MOONCAKE_SEGMENT_HOST_ID_SIZE);
	return false;
}
