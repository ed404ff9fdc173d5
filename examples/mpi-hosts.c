/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An MPI job over one or more hosts: every host's ranks share one copy of a
 * segment (the C API works per host), with one size and one outcome over the
 * whole job.
 *
 *   MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) gives the host's ranks; they are
 *   the library's group: world_size, rank_id and owner_rank are counted on
 *   the host, and complete() gets only the host's blobs.  The owner is global
 *   rank 0 on its host and the lowest local rank elsewhere.  The size comes
 *   from mooncake_segment_room(), the minimum over every rank; each phase ends
 *   with an MPI_Allreduce over the whole job, so a failure on any host stops
 *   every rank.
 *
 *   mpicc mpi-hosts.c $(pkg-config --cflags --libs mooncake-segment) -o mpi-hosts
 *   mpirun -n 4 ./mpi-hosts
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include <mooncake/segment.h>

#define BLOB   MOONCAKE_SEGMENT_BLOB_SIZE
#define OWNER  0		    /* the owner's global rank, on its host */
#define WANTED (UINT64_C(64) << 20) /* what the job would like, if every host has room */

/* Every rank's worst outcome: 0 when all succeeded. */
static int job_outcome(int err)
{
	int worst = 0;

	MPI_Allreduce(&err, &worst, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	return worst;
}

/* Report why this rank stops: its own error, or that another rank failed. */
static void report(int rank, const char *what)
{
	const char *why = mooncake_segment_last_error();

	fprintf(stderr, "rank %d: %s: %s\n", rank, what, why[0] ? why : "another rank failed");
}

int main(int argc, char **argv)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment *seg = NULL;
	unsigned char blob[BLOB], *blobs;
	int rank, local_rank, local_size, local_owner = 0, err, *world_ranks;
	uint64_t room = 0, size;
	unsigned long long room_ull, min_room;
	MPI_Comm host;
	char *base;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	/* The ranks of this host, ordered by their global rank. */
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
	MPI_Comm_rank(host, &local_rank);
	MPI_Comm_size(host, &local_size);
	world_ranks = calloc((size_t)local_size, sizeof(*world_ranks));
	blobs = calloc((size_t)local_size, BLOB);
	err = job_outcome(world_ranks && blobs ? 0 : -1);
	if (err || !world_ranks || !blobs) {
		err = -1;
		report(rank, "out of memory");
		goto out;
	}
	MPI_Allgather(&rank, 1, MPI_INT, world_ranks, 1, MPI_INT, host);
	for (int i = 0; i < local_size; i++)
		if (world_ranks[i] == OWNER)
			local_owner = i; /* else the lowest local rank, 0 */

	mooncake_segment_options_init(&opt);
	opt.world_size = (uint32_t)local_size;
	opt.rank_id = (uint32_t)local_rank;
	opt.owner_rank = (uint32_t)local_owner;

	/* One size for every host: the least room of any rank. */
	err = job_outcome(mooncake_segment_room(&opt, &room));
	if (err) {
		report(rank, "room");
		goto out;
	}
	room_ull = room;
	MPI_Allreduce(&room_ull, &min_room, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
	size = min_room < WANTED ? min_room : WANTED;

	err = job_outcome(mooncake_segment_create("mpi-hosts", size, &opt, &seg, blob));
	if (err) {
		report(rank, "create");
		goto out;
	}
	/* Only this host's blobs: the pages never leave the host. */
	MPI_Allgather(blob, BLOB, MPI_BYTE, blobs, BLOB, MPI_BYTE, host);
	err = job_outcome(mooncake_segment_complete(seg, blobs, (size_t)local_size * BLOB));
	if (err) {
		report(rank, "complete");
		goto out;
	}
	base = mooncake_segment_base(seg);
	if (local_rank == local_owner)
		snprintf(base, 64, "written by rank %d", rank);
	MPI_Barrier(MPI_COMM_WORLD); /* every rank completed, every owner wrote */
	mooncake_segment_finish(seg);
	printf("rank %d (local %d of %d, owner %d): %llu bytes, reads \"%s\"\n", rank, local_rank, local_size,
	       world_ranks[local_owner], (unsigned long long)size, base);
	MPI_Barrier(MPI_COMM_WORLD);
out:
	mooncake_segment_destroy(seg);
	free(world_ranks);
	free(blobs);
	MPI_Comm_free(&host);
	MPI_Finalize();
	return err ? 1 : 0;
}
