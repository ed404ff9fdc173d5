/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keeper/service.c and keeper/state.c without the rest of the daemon, for
 * tests/keeper/test_service_state.py: it reads one command a line on stdin
 * and answers one JSON line on stdout, so that a test run under
 * tests/keeper/fake_service_manager.py can make segments, save, be killed
 * and restarted, and see what came back.
 *
 *   start                    service_start(); the passed socket, can_store
 *   load                     state_load(); the segments and next generation
 *   create NAME SIZE CONTROL a sealed memfd of SIZE bytes (and CONTROL) with
 *                            a pattern, stored as pages-GEN/control-GEN, saved
 *   release NAME             saved without it, then removed from the store
 *   unseen NAME              marked handed to a peer the keeper cannot see, saved
 *   check                    each segment's pattern, read back
 *   ready STATUS             service_ready(STATUS)
 *   stopping                 service_stopping()
 *   exit
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keeper.h"

static struct kept_segment *table;
static size_t table_count;
static uint64_t next_generation = 1;

static void pattern(const struct kept_segment *k, uint8_t out[32])
{
	memset(out, 0, 32);
	snprintf((char *)out, 32, "g%" PRIu64 ":%.20s", k->record.generation, k->record.name);
}

static int save(void)
{
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, as state_save() takes */
	const struct kept_segment **list = calloc(table_count + 1, sizeof(*list));
	int err;

	for (size_t i = 0; i < table_count; i++)
		list[i] = &table[i];
	err = state_save(list, table_count, next_generation);
	free(list);
	return err;
}

static int make_memfd(const char *name, uint64_t size, const uint8_t *mark)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || pwrite(fd, mark, 32, 0) != 32 ||
	    pwrite(fd, mark, 32, (off_t)(size - 32)) != 32 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -1;
	return fd;
}

static void create(const char *name, uint64_t size, uint64_t control)
{
	struct kept_segment *k;
	uint8_t mark[32];
	char fdname[64];
	int err;

	k = realloc(table, (table_count + 1) * sizeof(*table));
	if (!k) {
		printf("{\"error\": \"out of memory\"}\n");
		return;
	}
	table = k;
	k = &table[table_count];
	memset(k, 0, sizeof(*k));
	snprintf(k->record.name, sizeof(k->record.name), "%s", name);
	k->record.fingerprint = 0x1234;
	k->record.size = size;
	k->record.page_size = 4096;
	k->record.control_bytes = control;
	k->record.generation = next_generation++;
	k->record.created = 1700000000;
	k->record.world_size = 4;
	k->record.owner_uid = (uint32_t)getuid();
	k->record.identity_bytes = 3;
	memcpy(k->record.identity, "id\n", 3);
	pattern(k, mark);
	k->pages_fd = make_memfd("probe-pages", size, mark);
	k->control_fd = control ? make_memfd("probe-control", control, mark) : -1;
	if (k->pages_fd < 0 || (control && k->control_fd < 0)) {
		printf("{\"error\": \"memfd: %s\"}\n", strerror(errno));
		return;
	}
	table_count++;
	snprintf(fdname, sizeof(fdname), "pages-%" PRIu64, k->record.generation);
	err = service_store(fdname, k->pages_fd);
	if (!err && control) {
		snprintf(fdname, sizeof(fdname), "control-%" PRIu64, k->record.generation);
		err = service_store(fdname, k->control_fd);
	}
	if (!err)
		err = save();
	printf("{\"generation\": %" PRIu64 ", \"rc\": %d}\n", k->record.generation, err);
}

static void release(const char *name)
{
	char fdname[64];
	int err = -ENOENT;

	for (size_t i = 0; i < table_count; i++) {
		struct kept_segment k = table[i];

		if (strcmp(k.record.name, name) != 0)
			continue;
		table[i] = table[--table_count];
		err = save();
		snprintf(fdname, sizeof(fdname), "pages-%" PRIu64, k.record.generation);
		(void)service_remove(fdname);
		close(k.pages_fd);
		if (k.control_fd >= 0) {
			snprintf(fdname, sizeof(fdname), "control-%" PRIu64, k.record.generation);
			(void)service_remove(fdname);
			close(k.control_fd);
		}
		break;
	}
	printf("{\"rc\": %d}\n", err);
}

static void report(const char *what)
{
	printf("{\"%s\": true, \"next_generation\": %" PRIu64 ", \"segments\": [", what, next_generation);
	for (size_t i = 0; i < table_count; i++) {
		const struct kept_segment *k = &table[i];
		uint8_t mark[32], got[32], tail[32];
		bool intact;

		pattern(k, mark);
		intact = pread(k->pages_fd, got, 32, 0) == 32 &&
			 pread(k->pages_fd, tail, 32, (off_t)(k->record.size - 32)) == 32 &&
			 !memcmp(got, mark, 32) && !memcmp(tail, mark, 32);
		if (k->control_fd >= 0)
			intact = intact && pread(k->control_fd, got, 32, 0) == 32 && !memcmp(got, mark, 32);
		printf("%s{\"name\": \"%s\", \"generation\": %" PRIu64 ", \"size\": %" PRIu64
		       ", \"control_bytes\": %" PRIu64
		       ", \"control_fd\": %s, \"identity_ok\": %s, \"mappers_unknown\": %s, "
		       "\"handed_unseen\": %s, \"intact\": %s}",
		       i ? ", " : "", k->record.name, k->record.generation, k->record.size,
		       k->record.control_bytes, k->control_fd >= 0 ? "true" : "false",
		       k->record.identity_bytes == 3 && !memcmp(k->record.identity, "id\n", 3) ? "true"
											       : "false",
		       k->record.mappers == MC_KEEPER_MAPPERS_UNKNOWN ? "true" : "false",
		       k->handed_unseen ? "true" : "false", intact ? "true" : "false");
	}
	printf("]}\n");
}

int main(void)
{
	char line[512], a[256];
	unsigned long long size, control;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line, "start") == 0) {
			int rc = service_start(), fd = service_listen_fd(), type = 0;
			socklen_t len = sizeof(type);

			if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
				type = -1;
			printf("{\"rc\": %d, \"listen_fd\": %d, \"seqpacket\": %s, \"can_store\": %s}\n", rc,
			       fd, type == SOCK_SEQPACKET ? "true" : "false",
			       service_can_store() ? "true" : "false");
		} else if (strcmp(line, "load") == 0) {
			int rc;

			for (size_t i = 0; table && i < table_count; i++)
				free(table[i].declaration);
			free(table);
			rc = state_load(&table, &table_count, &next_generation);
			if (rc)
				printf("{\"rc\": %d}\n", rc);
			else
				report("loaded");
		} else if (sscanf(line, "create %255s %llu %llu", a, &size, &control) == 3) {
			create(a, size, control);
		} else if (sscanf(line, "release %255s", a) == 1) {
			release(a);
		} else if (sscanf(line, "unseen %255s", a) == 1) {
			for (size_t i = 0; i < table_count; i++)
				if (!strcmp(table[i].record.name, a))
					table[i].handed_unseen = true;
			printf("{\"rc\": %d}\n", save());
		} else if (strcmp(line, "check") == 0) {
			report("checked");
		} else if (strncmp(line, "ready ", 6) == 0) {
			service_ready(line + 6);
			printf("{\"rc\": 0}\n");
		} else if (strcmp(line, "stopping") == 0) {
			service_stopping();
			printf("{\"rc\": 0}\n");
		} else if (strcmp(line, "exit") == 0) {
			break;
		} else {
			printf("{\"error\": \"unknown command\"}\n");
		}
	}
	return 0;
}
