/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The options as releases 0.1 and 0.2 laid them out, for the programs built
 * then.  struct mooncake_segment_options grew in 0.3 (background_commit and
 * the registration range): an old program's struct is shorter, so the
 * functions that take it keep their old versions (options_init@0.1,
 * create@0.1, room@0.2), which read and write only the old bytes, and the
 * new layout is the default version (MOONCAKE_SEGMENT_0.3 in the version
 * script).  Without
 * this, options_init would write past an old program's struct.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "base/base.h"
#include "mooncake/segment.h"

/* The 0.1/0.2 struct, field for field; the new struct starts with it. */
struct mc_options_0_1 {
	uint32_t world_size;
	uint32_t rank_id;
	uint32_t owner_rank;
	int32_t device_id;
	bool mmap;
	bool host_register;
	bool hugetlb;
	int32_t numa_node;
	uint32_t commit_threads;
	bool populate_on_import;
	uint64_t hugetlb_page_size;
	uint64_t register_chunk_size;
};

_Static_assert(sizeof(struct mc_options_0_1) == offsetof(struct mooncake_segment_options, background_commit),
	       "the 0.3 options must start with the 0.1 ones, unpadded");

/* The new struct for an old one: its fields, and the defaults for the rest. */
static void widen(const struct mc_options_0_1 *old, struct mooncake_segment_options *opt)
{
	mooncake_segment_options_init(opt);
	memcpy(opt, old, sizeof(*old));
}

MC_EXPORT void mc_options_init_0_1(struct mc_options_0_1 *old);
MC_EXPORT int mc_create_0_1(const char *name, uint64_t size, const struct mc_options_0_1 *old,
			    struct mooncake_segment **out, void *blob);
MC_EXPORT int mc_room_0_2(const struct mc_options_0_1 *old, uint64_t *bytes);

__asm__(".symver mc_options_init_0_1, mooncake_segment_options_init@MOONCAKE_SEGMENT_0.1");
__asm__(".symver mc_create_0_1, mooncake_segment_create@MOONCAKE_SEGMENT_0.1");
__asm__(".symver mc_room_0_2, mooncake_segment_room@MOONCAKE_SEGMENT_0.2");

void mc_options_init_0_1(struct mc_options_0_1 *old)
{
	struct mooncake_segment_options opt;

	if (!old)
		return;
	mooncake_segment_options_init(&opt);
	memcpy(old, &opt, sizeof(*old));
}

int mc_create_0_1(const char *name, uint64_t size, const struct mc_options_0_1 *old,
		  struct mooncake_segment **out, void *blob)
{
	struct mooncake_segment_options opt;

	if (!old)
		return mooncake_segment_create(name, size, NULL, out, blob);
	widen(old, &opt);
	return mooncake_segment_create(name, size, &opt, out, blob);
}

int mc_room_0_2(const struct mc_options_0_1 *old, uint64_t *bytes)
{
	struct mooncake_segment_options opt;

	if (!old)
		return mooncake_segment_room(NULL, bytes);
	widen(old, &opt);
	return mooncake_segment_room(&opt, bytes);
}
