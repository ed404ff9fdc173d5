/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's private interface to its own command-line tool: the
 * MOONCAKE_SEGMENT_PRIVATE node of libmooncake-segment.sym.
 *
 * NOT FOR APPLICATIONS.  These symbols may change or go in any release; the
 * tool is packaged to need the library of exactly its own version.  What an
 * application needs is in <mooncake/segment.h> (doc/decisions.md says which
 * fact went where and why).  Each function is defined where its job is and
 * marked MC_PRIVATE there; the library calls them too, so the tool reports
 * what create() itself reads.  Each declaration says why it is private and
 * not public.  Like the public header, this one includes no header of the
 * library, so any folder of lib/ may include it (lib/README.md).
 */
#ifndef MOONCAKE_SEGMENT_PRIVATE_H
#define MOONCAKE_SEGMENT_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* A definition that leaves the library in the MOONCAKE_SEGMENT_PRIVATE node. */
#define MC_PRIVATE __attribute__((visibility("default")))

/* --- host facts under the host root (procfs.c, procfs.h) --------------------- */

/* The first line of @path (absolute, under /proc or /sys) below the host
 * root, newline stripped; false on error.
 * Why private: plain procfs/sysfs text; exported only so that the CLI
 * honours MOONCAKE_SEGMENT_HOST_ROOT exactly as the library does. */
bool mc_read_host_line(const char *path, char *buf, size_t size);
/* A /proc/meminfo field in bytes ("kB" fields) or as a count; 0 when absent.
 * Why private: as mc_read_host_line(). */
uint64_t mc_meminfo_field(const char *name);

/* --- memory room (limits.c, cgroup.c) ------------------------------------------ */

/* Page cache of a cgroup (memory.stat), in bytes. */
struct mc_page_cache {
	uint64_t active_file;
	uint64_t inactive_file;
	uint64_t dirty;
	uint64_t writeback;
	uint64_t clean; /* active + inactive - dirty - writeback: what reclaim frees */
};

struct mc_memory_room {
	uint64_t
		room; /* limit - (usage - cache.clean): bytes that can still be charged, UINT64_MAX unlimited */
	uint64_t limit;
	uint64_t usage;
	struct mc_page_cache cache;
	char where[256];      /* the cgroup directory that binds */
	char outermost[1280]; /* the outermost limited directory: every limit of ours nests in it */
};

/* This process's memory cgroup room, read under the host root as create's
 * room check reads it; false when no limit applies.
 * Why private: a breakdown for a person diagnosing a refusal (doctor);
 * mooncake_segment_room() is the number a program needs, and this struct
 * follows cgroup v1/v2 details we may still change. */
bool mc_self_cgroup_room(struct mc_memory_room *room);

/* --- HugeTLB pools (hugetlb.c) ----------------------------------------------- */

/* The page sizes that have a pool on this host, ascending, at most @max of
 * them into @sizes; returns how many there are.
 * Why private: diagnosis (doctor, bench); room(hugetlb=true) answers the
 * program's question. */
size_t mc_hugetlb_sizes(uint64_t *sizes, size_t max);
/* The pool of @page_size: its pages and those free and not reserved; false
 * when it cannot be read.  Why private: as mc_hugetlb_sizes(). */
bool mc_hugetlb_pool(uint64_t page_size, uint64_t *total, uint64_t *available);

/* --- the kernel's account of mappings (smaps.c) ----------------------------- */

/* One mapping of an smaps file; the kB fields in bytes, 0 when absent. */
struct mc_smaps_mapping {
	uint64_t start; /* [start, end): the virtual range */
	uint64_t end;
	uint64_t offset; /* into the file */
	uint64_t ino;
	const char *name; /* the path column, "" for an anonymous mapping; valid during the call */
	uint64_t rss;
	uint64_t pss;
	uint64_t shmem_pmd_mapped; /* THP */
	uint64_t file_pmd_mapped;
	uint64_t shared_hugetlb; /* HugeTLB pages: not part of Rss or Pss */
	uint64_t private_hugetlb;
	unsigned int dev_major;
	unsigned int dev_minor;
};
/* Called once per mapping, in the file's order; false stops the walk. */
typedef bool (*mc_smaps_visit)(const struct mc_smaps_mapping *mapping, void *arg);
/* Read the smaps file @path (openat(@dirfd, @path): AT_FDCWD and
 * "/proc/self/smaps" for this process, a /proc root's descriptor and
 * "PID/smaps" for another) and hand each mapping, once its fields are read,
 * to @visit.  The last mapping ends with the file, whatever its last line;
 * a read error ends the walk as the end of the file would (a process that
 * exits mid-read).  0, or -errno when the file cannot be opened.
 * Why private: the CLI's `list` reads other processes' smaps under its
 * --proc root with the library's parser; the format is the kernel's, and a
 * program asks get_info() about its own segment. */
int mc_smaps_walk(int dirfd, const char *path, mc_smaps_visit visit, void *arg);

struct mc_mapping_usage {
	uint64_t rss;
	uint64_t pss;
	uint64_t pmd_mapped; /* THP: ShmemPmdMapped + FilePmdMapped */
	uint64_t hugetlb;    /* HugeTLB pages mapped: not part of Rss or Pss */
};
/* Sum /proc/self/smaps over every VMA inside [@base, @base+@len) (madvise may
 * have split the mapping); false when no VMA starts at @base.
 * Why private: the demo's PSS figure; get_info() gives a program the
 * residency it needs. */
bool mc_mapping_usage(const void *base, uint64_t len, struct mc_mapping_usage *usage);

/* --- accelerator runtimes (accel.c) ------------------------------------------ */

#define MC_RUNTIME_REPORT_DEVICES 16

/* One accelerator runtime of this build, as doctor reports it. */
struct mc_runtime_report {
	const char *name; /* "cuda", "ascend" */
	bool loaded;	  /* its library and entry points loaded */
	bool available;	  /* ... and it reports a device: host registration can use it */
	const char *why;  /* why it is not available; "" when it is */
	int devices;	  /* devices listed below: those that name their PCI device */
	struct {
		char pci_bus_id[32];
		int numa_node; /* where automatic placement puts a segment for it; -1 unknown */
	} device[MC_RUNTIME_REPORT_DEVICES];
};
/* Runtime @index of this build, in order of preference; loads it.  False
 * past the last one.
 * Why private: doctor's report; a program has its runtime's own API, and
 * what placement chose is public in get_info().numa_node.  A public form
 * would freeze a per-runtime struct we may still change. */
bool mc_accel_report(size_t index, struct mc_runtime_report *report);

/* --- the readiness front of another process's segment (control.c) ----------- */

/* The front's state, as enum mc_front_state (segment/control.h) numbers it. */
#define MC_FRONT_VIEW_COMMITTING 0
#define MC_FRONT_VIEW_COMMITTED	 1
#define MC_FRONT_VIEW_FAILED	 2

/* What a segment's control area says, read at one moment. */
struct mc_front_view {
	uint64_t alloc_size;
	uint64_t committed;  /* [0, committed) is committed */
	uint32_t state;	     /* MC_FRONT_VIEW_* */
	int32_t error;	     /* failed: the positive errno */
	uint32_t error_rank; /* failed: the rank that reported it */
	uint32_t owner_pid;  /* in the owner's PID namespace */
	uint32_t world_size;
	uint32_t slot_count;	    /* publish slots declared */
	uint32_t alignment;	    /* options.alignment declared, 0: the default (the page size in use) */
	bool owner_died;	    /* committing, but the owner's commit thread died (no rank noticed yet) */
	uint64_t commit_ns;	    /* the whole commit, once committed */
	uint64_t commit_started_ns; /* the owner's CLOCK_MONOTONIC when it created the area */
	char message[1024];	    /* failed: the error's sentence (the control area's, whole) */
};

/* Read the control area open at @fd (a segment's companion memfd, named
 * "mooncake-segment-control:LABEL|owner=PID", found by the CLI through
 * /proc/PID/fd or /proc/PID/map_files) into @out, mapping it read-only for
 * the moment; neither the area nor @fd is changed (@fd stays open).  0, or
 * -EPROTO when it is not a control area of this version, or another
 * negative errno.
 * Why private: the area's layout (doc/wire-format.md) is the library's own
 * and changes with its version; a program asks its own segment through
 * mooncake_segment_ready_bytes() and wait_ready(), never another process's. */
int mc_control_read(int fd, struct mc_front_view *out);

/* --- the node keeper's client (route/keeper-client.c, route/keeper-wire.c) ------
 *
 * mc_keeper_socket_path, mc_keeper_open, mc_keeper_exchange, mc_keeper_close
 * (route/keeper-client.h) and mc_keeper_name_valid, mc_keeper_type_name,
 * mc_keeper_field_name (route/keeper-wire.h) are in this node, declared in those headers, which
 * the CLI includes for their structs (lib/README.md).
 * Why private: the CLI's `keep list|stat|release` speak the keeper's
 * protocol, which is the library's own and versioned with it; a program
 * keeps a segment through create()'s options. */

/* --- this host's namespaces and THP mode (host.c) ----------------------------- */

/* The inode of this process's PID (network) namespace, 0 when unknown: what
 * the blob carries to tell a peer in another namespace.
 * Why private: doctor shows them so a person can see which containers share
 * a route; a program compares blobs, not namespaces. */
uint64_t mc_host_pid_namespace(void);
uint64_t mc_host_net_namespace(void);
/* Whether shmem_enabled selects a mode that gives a memfd 2 MiB pages.
 * Why private: doctor's advice; get_info() tells a program what it got. */
bool mc_host_shmem_thp_allowed(void);

/* --- clock (inline: no symbol; the CLI's bench times with it too) ------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t mc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The same clock in milliseconds, signed for deadline arithmetic. */
static inline int64_t mc_now_ms(void)
{
	return (int64_t)(mc_now_ns() / 1000000u);
}

#endif
