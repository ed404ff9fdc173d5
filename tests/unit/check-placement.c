/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NUMA topology and memory-room logic on fixture sysfs and cgroup trees
 * (multi-node and limited hosts this machine is not), and the real
 * placement and room checks on this host.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"

static char root[256];

static void put(const char *rel, const char *text)
{
	fixture_put(root, rel, text);
}

static void make_root(void)
{
	fixture_tree_create(root, sizeof(root));
}

static void remove_root(void)
{
	fixture_tree_remove(root);
}

/* The fixture as the host root: the topology is read under it, as create() reads it. */
static void make_host_root(void)
{
	make_root();
	mc_host_root_set(root);
}

static void remove_host_root(void)
{
	mc_host_root_set(NULL);
	remove_root();
}

START_TEST(test_node_lists)
{
	uint64_t mask;

	ck_assert(mc_parse_node_list("0", &mask) && mask == 1);
	ck_assert(mc_parse_node_list("0-3,5\n", &mask) && mask == 0x2f);
	ck_assert(mc_parse_node_list("1,3-4", &mask) && mask == 0x1a);
	ck_assert(mc_parse_node_list("63", &mask) && mask == UINT64_C(1) << 63);
	ck_assert(!mc_parse_node_list("64", &mask));
	ck_assert(!mc_parse_node_list("3-1", &mask));
	ck_assert(!mc_parse_node_list("a", &mask));
	ck_assert(!mc_parse_node_list("0;1", &mask));
}
END_TEST

START_TEST(test_topology_of_a_two_socket_fixture)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mc_placement p;
	uint64_t mask;

	make_host_root();
	put("sys/devices/system/node/online", "0-1\n");
	put("sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
	put("sys/bus/pci/devices/0000:18:00.0/numa_node", "-1\n");
	ck_assert(mc_topology_online_nodes(&mask) && mask == 3);
	ck_assert_int_eq(mc_topology_pci_node("0000:3b:00.0"), 1);
	ck_assert_int_eq(mc_topology_pci_node("0000:18:00.0"), -1); /* no affinity reported */
	ck_assert_int_eq(mc_topology_pci_node("0000:99:00.0"), -1); /* no such device */

	opt.numa_node = 1;
	ck_assert_int_eq(mc_placement_resolve(opt.numa_node, -1, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_BIND);
	ck_assert_int_eq(p.node, 1);
	ck_assert_uint_eq(p.nodes, 2);
	opt.numa_node = 2;
	ck_assert_error(mc_placement_resolve(opt.numa_node, -1, &p), EINVAL, "numa_node 2 does not exist");
	opt.numa_node = MOONCAKE_SEGMENT_NUMA_INTERLEAVE;
	ck_assert_int_eq(mc_placement_resolve(opt.numa_node, -1, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_INTERLEAVE);
	ck_assert_uint_eq(p.nodes, 3);
	opt.numa_node = MOONCAKE_SEGMENT_NUMA_AUTO;
	ck_assert_int_eq(mc_placement_resolve(opt.numa_node, -1, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_DEFAULT);
	/* Automatic follows the device's host node when it is online, and only then. */
	ck_assert(mc_placement_wants_device_node(MOONCAKE_SEGMENT_NUMA_AUTO));
	ck_assert(!mc_placement_wants_device_node(0));
	ck_assert(!mc_placement_wants_device_node(MOONCAKE_SEGMENT_NUMA_INTERLEAVE));
	ck_assert_int_eq(mc_placement_resolve(MOONCAKE_SEGMENT_NUMA_AUTO, 1, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_PREFERRED);
	ck_assert_int_eq(p.node, 1);
	ck_assert_int_eq(mc_placement_resolve(MOONCAKE_SEGMENT_NUMA_AUTO, 5, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_DEFAULT);
	ck_assert_int_eq(mc_placement_resolve(0, 1, &p), 0); /* explicit wins */
	ck_assert_int_eq(p.node, 0);
	ck_assert_int_eq(mc_placement_check(1), 0);
	ck_assert_error(mc_placement_check(2), EINVAL, "numa_node 2 does not exist");
	remove_host_root();
}
END_TEST

START_TEST(test_interleave_on_one_node_is_the_default_policy)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mc_placement p;

	make_host_root();
	put("sys/devices/system/node/online", "0\n");
	opt.numa_node = MOONCAKE_SEGMENT_NUMA_INTERLEAVE;
	ck_assert_int_eq(mc_placement_resolve(opt.numa_node, -1, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_DEFAULT);
	/* One node: nothing to choose, so no device to ask about. */
	ck_assert(!mc_placement_wants_device_node(MOONCAKE_SEGMENT_NUMA_AUTO));
	ck_assert_int_eq(mc_placement_resolve(MOONCAKE_SEGMENT_NUMA_AUTO, 0, &p), 0);
	ck_assert_int_eq(p.mode, MC_PLACE_DEFAULT);
	remove_host_root();
}
END_TEST

START_TEST(test_cgroup_v2_room_counts_clean_page_cache_as_reclaimable)
{
	struct mc_memory_room room;
	char proc[300];

	make_root();
	put("proc-cgroup", "0::/kubepods/pod1\n");
	put("kubepods/memory.max", "max\n");
	put("kubepods/pod1/memory.max", "1073741824\n");
	put("kubepods/pod1/memory.current", "629145600\n");
	/* shmem (our segments) is anon: only the file lists, less dirty and writeback, are reclaimable. */
	put("kubepods/pod1/memory.stat", "anon 100000000\nfile 529145600\nshmem 50000000\n"
					 "active_file 314572800\ninactive_file 104857600\nfile_dirty 4096\n"
					 "file_writeback 8192\n");
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
	ck_assert(mc_cgroup_memory_room(proc, root, &room));
	ck_assert_uint_eq(room.limit, 1073741824);
	ck_assert_uint_eq(room.usage, 629145600);
	ck_assert_uint_eq(room.cache.active_file, 314572800);
	ck_assert_uint_eq(room.cache.inactive_file, 104857600);
	ck_assert_uint_eq(room.cache.dirty + room.cache.writeback, 12288);
	ck_assert_uint_eq(room.cache.clean, 314572800 + 104857600 - 12288);
	ck_assert_uint_eq(room.room, 1073741824 - (629145600 - (314572800 + 104857600 - 12288)));
	ck_assert_msg(strstr(room.where, "kubepods/pod1"), "%s", room.where);
	ck_assert_str_eq(room.outermost, room.where);
	remove_root();
}
END_TEST

START_TEST(test_cgroup_clean_cache_never_exceeds_usage)
{
	struct mc_memory_room room;
	char proc[300];

	make_root();
	/* memory.stat and memory.current are not read atomically: the cache may read larger. */
	put("proc-cgroup", "0::/c\n");
	put("c/memory.max", "1000000000\n");
	put("c/memory.current", "100000000\n");
	put("c/memory.stat", "active_file 150000000\ninactive_file 0\n");
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
	ck_assert(mc_cgroup_memory_room(proc, root, &room));
	ck_assert_uint_eq(room.cache.clean, 100000000);
	ck_assert_uint_eq(room.room, 1000000000);
	remove_root();
}
END_TEST

START_TEST(test_cgroup_ancestor_with_less_room_wins)
{
	struct mc_memory_room room;
	char proc[300];

	make_root();
	put("proc-cgroup", "0::/a/b\n");
	put("a/memory.max", "734003200\n"); /* 700 MiB */
	put("a/memory.current", "629145600\n");
	put("a/b/memory.max", "1073741824\n");
	put("a/b/memory.current", "104857600\n");
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
	ck_assert(mc_cgroup_memory_room(proc, root, &room));
	ck_assert_uint_eq(room.room, 734003200 - 629145600);
	ck_assert_msg(strstr(room.where, "/a") && !strstr(room.where, "/a/b"), "%s", room.where);
	remove_root();
}
END_TEST

START_TEST(test_cgroup_outermost_limit_keys_the_commit_lock)
{
	struct mc_memory_room room;
	char proc[300];

	make_root();
	/* The leaf binds, but a sibling's create is charged to "pod" too: the lock is taken there. */
	put("proc-cgroup", "0::/pod/engine/worker\n");
	put("pod/memory.max", "8589934592\n");
	put("pod/memory.current", "1073741824\n");
	put("pod/engine/memory.max", "max\n");
	put("pod/engine/worker/memory.max", "2147483648\n");
	put("pod/engine/worker/memory.current", "1073741824\n");
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
	ck_assert(mc_cgroup_memory_room(proc, root, &room));
	ck_assert_msg(strstr(room.where, "/pod/engine/worker"), "%s", room.where);
	ck_assert_msg(strstr(room.outermost, "/pod") && !strstr(room.outermost, "/pod/"), "%s",
		      room.outermost);
	remove_root();
}
END_TEST

START_TEST(test_cgroup_v1_and_hybrid_hierarchies)
{
	struct mc_memory_room room;
	char proc[300];

	make_root();
	/* Hybrid: the v1 memory controller holds the limit, not the v2 line. */
	put("proc-cgroup", "12:pids:/\n4:memory:/docker/abc\n0::/\n");
	put("memory/docker/abc/memory.limit_in_bytes", "268435456\n");
	put("memory/docker/abc/memory.usage_in_bytes", "201326592\n");
	/* v1: the hierarchical "total_" figures count; the local ones (here smaller) do not. */
	put("memory/docker/abc/memory.stat",
	    "cache 150994944\nactive_file 1\ninactive_file 1\ndirty 1\n"
	    "total_cache 150994944\ntotal_active_file 100663296\n"
	    "total_inactive_file 50331648\ntotal_dirty 4096\ntotal_writeback 4096\n");
	put("memory/docker/memory.limit_in_bytes", "9223372036854771712\n"); /* v1's "unlimited" */
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
	ck_assert(mc_cgroup_memory_room(proc, root, &room));
	ck_assert_uint_eq(room.cache.active_file, 100663296);
	ck_assert_uint_eq(room.cache.inactive_file, 50331648);
	ck_assert_uint_eq(room.cache.clean, 100663296 + 50331648 - 8192);
	ck_assert_uint_eq(room.room, 268435456 - (201326592 - (100663296 + 50331648 - 8192)));
	remove_root();
}
END_TEST

START_TEST(test_no_limit_means_no_room_check)
{
	struct mc_memory_room room;
	char proc[300];

	make_root();
	put("proc-cgroup", "0::/user.slice\n");
	put("user.slice/memory.max", "max\n");
	snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
	ck_assert(!mc_cgroup_memory_room(proc, root, &room));
	put("proc-cgroup", "1:cpu:/\n");
	ck_assert(!mc_cgroup_memory_room(proc, root, &room));
	remove_root();
}
END_TEST

START_TEST(test_explicit_node_zero_is_applied_and_reported)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	opt.numa_node = 0;
	ck_assert_int_eq(mooncake_segment_create("numa", TEST_SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_int_eq(info.numa_node_requested, 0);
	if (!(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED)) {
		ck_assert_int_eq(info.numa_node, 0);
		ck_assert_uint_eq(info.numa_node_mask, 1);
	}
	mooncake_segment_destroy(seg);
}
END_TEST

START_TEST(test_node_that_does_not_exist_is_einval)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	uint64_t online = 0;
	int fds = count_fds(), maps = count_mappings();

	mc_topology_online_nodes(&online);
	opt.numa_node = 63;
	if (online & (UINT64_C(1) << 63))
		return; /* a 64-node host: nothing to test */
	ck_assert_error(mooncake_segment_create("numa", TEST_SIZE, &opt, &seg, blob), EINVAL,
			"does not exist");
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

START_TEST(test_more_than_the_host_has_is_enomem_before_any_page)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	uint64_t too_much =
		mc_meminfo_field("MemAvailable") + mc_meminfo_field("SwapFree") + (UINT64_C(1) << 30);
	int fds = count_fds(), maps = count_mappings();

	ck_assert_error(mooncake_segment_create("huge", too_much, &opt, &seg, blob), ENOMEM, "available");
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
	/* A peer commits nothing, so it is not refused. */
	opt = test_options(2, 1, 0);
	ck_assert_int_eq(mooncake_segment_create("huge", too_much, &opt, &seg, blob), 0);
	mooncake_segment_destroy(seg);
}
END_TEST

Suite *suite_placement(void)
{
	Suite *s = suite_create("placement");
	TCase *fixtures = tcase_create("fixtures");
	TCase *host = tcase_create("host");

	tcase_add_test(fixtures, test_node_lists);
	tcase_add_test(fixtures, test_topology_of_a_two_socket_fixture);
	tcase_add_test(fixtures, test_interleave_on_one_node_is_the_default_policy);
	tcase_add_test(fixtures, test_cgroup_v2_room_counts_clean_page_cache_as_reclaimable);
	tcase_add_test(fixtures, test_cgroup_clean_cache_never_exceeds_usage);
	tcase_add_test(fixtures, test_cgroup_ancestor_with_less_room_wins);
	tcase_add_test(fixtures, test_cgroup_outermost_limit_keys_the_commit_lock);
	tcase_add_test(fixtures, test_cgroup_v1_and_hybrid_hierarchies);
	tcase_add_test(fixtures, test_no_limit_means_no_room_check);
	tcase_add_test(host, test_explicit_node_zero_is_applied_and_reported);
	tcase_add_test(host, test_node_that_does_not_exist_is_einval);
	tcase_add_test(host, test_more_than_the_host_has_is_enomem_before_any_page);
	suite_add_tcase(s, fixtures);
	suite_add_tcase(s, host);
	return s;
}
