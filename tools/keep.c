/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment keep health|list|stat|release: the node keeper and its segments
 * (mooncake-segmentd(8)), asked over its socket with the library's client
 * (route/keeper-client.h, in the library's private node).  A table or JSON
 * (doc/keep-json.md).  The keeper decides who may see and release what.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"
#include "route/keeper-client.h"
#include "route/keeper-wire.h"

/* The keeper answers a LIST, STAT or RELEASE at once; a stuck one is an error. */
#define ANSWER_TIMEOUT_MS 10000

struct keep_config {
	const char *socket; /* NULL: MOONCAKE_SEGMENT_KEEPER or the default */
	bool json;
	bool owner_given; /* --owner: another uid's segment of that name */
	uint32_t owner_uid;
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: %s keep health [--json] [--socket PATH]\n"
		"       %s keep list [--json] [--socket PATH]\n"
		"       %s keep stat NAME [--owner UID] [--json] [--socket PATH]\n"
		"       %s keep release NAME [--owner UID] [--socket PATH]\n\n"
		"The segments the node keeper (mooncake-segmentd) holds past their ranks.\n\n"
		"  health             does the keeper answer? (exit 0 when it does: a health check)\n"
		"  list               every kept segment this user may see\n"
		"  stat NAME          one kept segment\n"
		"  release NAME       free it now, or with its last mapping when ranks still map it\n"
		"  --owner UID        the segment NAME of that uid (names are per uid; default: yours)\n"
		"  --json             machine-readable (schema: doc/keep-json.md)\n"
		"  --socket PATH      the keeper's socket (default: $MOONCAKE_SEGMENT_KEEPER or\n"
		"                     " MC_KEEPER_DEFAULT_SOCKET ")\n",
		PROGRAM, PROGRAM, PROGRAM, PROGRAM);
}

static const char *sharing_name(uint8_t sharing)
{
	return sharing == MC_KEEPER_SHARE_ANY ? "any" : sharing == MC_KEEPER_SHARE_GROUP ? "group" : "uid";
}

/* One request and its reply; 0, 1 (the keeper refused: its sentence is
 * printed) or 1 with the library's message on a failed exchange. */
static int ask(struct mc_keeper_conn *conn, const char *command, struct mc_keeper_request *req,
	       struct mc_keeper_reply *rep)
{
	int fds[2];

	if (mc_keeper_exchange(conn, req, rep, fds, ANSWER_TIMEOUT_MS) != 0) {
		fprintf(stderr, "%s keep %s: %s\n", PROGRAM, command, mooncake_segment_last_error());
		return 1;
	}
	if (rep->status != 0) {
		fprintf(stderr, "%s keep %s: the keeper refused (%s): %s\n", PROGRAM, command,
			strerror((int)rep->status), rep->text);
		return 1;
	}
	return 0;
}

static void json_segment(FILE *out, const struct mc_keeper_segment *s, time_t now)
{
	fputs("{\"name\": ", out);
	json_string(out, s->name);
	fprintf(out,
		", \"size\": %" PRIu64 ", \"page_size\": %" PRIu64 ", \"control_bytes\": %" PRIu64
		", \"generation\": %" PRIu64 ", \"fingerprint\": \"%016" PRIx64 "\", \"created\": %" PRIu64
		", \"age_seconds\": %" PRId64 ", \"world_size\": %u, \"owner_uid\": %u, \"sharing\": \"%s\"",
		s->size, s->page_size, s->control_bytes, s->generation, s->fingerprint, s->created,
		(int64_t)now - (int64_t)s->created, (unsigned)s->world_size, (unsigned)s->owner_uid,
		sharing_name(s->sharing));
	if (s->sharing == MC_KEEPER_SHARE_GROUP)
		fprintf(out, ", \"gid\": %u", (unsigned)s->gid);
	fprintf(out, ", \"hugetlb\": %s, \"released\": %s, \"mappers\": ",
		s->flags & MC_KEEPER_SEGMENT_HUGETLB ? "true" : "false",
		s->flags & MC_KEEPER_SEGMENT_RELEASED ? "true" : "false");
	if (s->mappers == MC_KEEPER_MAPPERS_UNKNOWN)
		fputs("null", out);
	else
		fprintf(out, "%u", (unsigned)s->mappers);
	fprintf(out, ", \"warm_attaches\": %u, \"identity_hex\": \"", (unsigned)s->warm_attaches);
	for (unsigned int i = 0; i < s->identity_bytes; i++)
		fprintf(out, "%02x", s->identity[i]);
	fputs("\"}", out);
}

static void table_header(FILE *out)
{
	/* NAME last, as ps puts COMMAND: a name of up to 255 bytes never pushes
	 * the other columns out of their places.  GEN is the keeper's clock in
	 * microseconds (16 digits), OWNER any uid. */
	fprintf(out, "%10s %8s %16s %10s %-6s %7s %5s %9s  %s\n", "SIZE", "PAGE", "GEN", "OWNER", "SHARE",
		"MAPPERS", "WARM", "AGE", "NAME");
}

static void table_row(FILE *out, const struct mc_keeper_segment *s, time_t now)
{
	char size[32], page[32], name[4 * MC_KEEPER_NAME_MAX + 1], mappers[16];
	int64_t age = (int64_t)now - (int64_t)s->created;

	if (s->mappers == MC_KEEPER_MAPPERS_UNKNOWN)
		snprintf(mappers, sizeof(mappers), "?");
	else
		snprintf(mappers, sizeof(mappers), "%u", (unsigned)s->mappers);
	fprintf(out, "%10s %8s %16" PRIu64 " %10u %-6s %7s %5u %8" PRId64 "s  %s%s\n",
		format_size(s->size, size, sizeof(size)), format_size(s->page_size, page, sizeof(page)),
		s->generation, (unsigned)s->owner_uid, sharing_name(s->sharing), mappers,
		(unsigned)s->warm_attaches, age < 0 ? 0 : age, printable(s->name, name, sizeof(name)),
		s->flags & MC_KEEPER_SEGMENT_RELEASED ? " (released)" : "");
}

/* The keeper itself, from its HELLO reply: the "keeper" object of doc/keep-json.md. */
static void json_keeper(FILE *out, const struct mc_keeper_conn *conn, const struct mc_keeper_reply *hello)
{
	fputs("{\"socket\": ", out);
	json_string(out, conn->path);
	fprintf(out,
		", \"pid\": %u, \"instance\": \"%016" PRIx64 "\", \"survives_restart\": %s, \"kept\": %u}",
		(unsigned)hello->keeper_pid, hello->instance,
		hello->hello_flags & MC_KEEPER_HELLO_FDSTORE ? "true" : "false", (unsigned)hello->kept);
}

/* A health check's question (a liveness probe, ExecStartPost=, a script):
 * does the keeper answer, now?  0 with one line (or object), else 1 with
 * the reason.  A keeper that refuses this connection for its connection
 * limits is alive and serving others: 0, with its sentence on stderr
 * (a probe that restarted it would free what it keeps). */
static int keep_health(struct mc_keeper_conn *conn, const struct keep_config *cfg)
{
	static struct mc_keeper_reply rep;
	struct mc_keeper_request req = { .type = MC_KEEPER_HELLO };
	int fds[2], ret = mc_keeper_exchange(conn, &req, &rep, fds, ANSWER_TIMEOUT_MS);

	if (ret == -EUSERS) {
		fprintf(stderr, "%s keep health: the keeper answers, but is full: %s\n", PROGRAM,
			mooncake_segment_last_error());
		return 0;
	}
	if (ret) {
		fprintf(stderr, "%s keep health: %s\n", PROGRAM, mooncake_segment_last_error());
		return 1;
	}
	if (cfg->json) {
		json_keeper(stdout, conn, &rep);
		fputc('\n', stdout);
	} else {
		printf("keeper pid %u at %s answers: %u kept segment%s; its own restart %s them\n",
		       (unsigned)rep.keeper_pid, conn->path, (unsigned)rep.kept, rep.kept == 1 ? "" : "s",
		       rep.hello_flags & MC_KEEPER_HELLO_FDSTORE ? "keeps" : "LOSES");
	}
	return 0;
}

static int keep_list(struct mc_keeper_conn *conn, const struct keep_config *cfg)
{
	static struct mc_keeper_reply rep; /* 13 KB of records: not on the stack */
	struct mc_keeper_request req = { .type = MC_KEEPER_HELLO };
	time_t now = time(NULL);
	unsigned int total = 0;
	int ret = ask(conn, "list", &req, &rep);

	if (ret)
		return ret;
	if (cfg->json) {
		fputs("{\"keeper\": ", stdout);
		json_keeper(stdout, conn, &rep);
		fputs(",\n \"segments\": [", stdout);
	} else {
		printf("keeper pid %u at %s; its own restart %s kept segments\n", (unsigned)rep.keeper_pid,
		       conn->path, rep.hello_flags & MC_KEEPER_HELLO_FDSTORE ? "keeps" : "LOSES");
		table_header(stdout);
	}
	memset(&req, 0, sizeof(req));
	req.type = MC_KEEPER_LIST;
	do {
		ret = ask(conn, "list", &req, &rep);
		if (ret)
			break;
		for (unsigned int i = 0; i < rep.count; i++, total++) {
			if (cfg->json) {
				fputs(total ? ",\n  " : "\n  ", stdout);
				json_segment(stdout, &rep.segments[i], now);
			} else {
				table_row(stdout, &rep.segments[i], now);
			}
		}
	} while (mc_keeper_list_advance(&req, &rep));
	if (cfg->json)
		fputs(total ? "\n ]}\n" : "]}\n", stdout);
	return ret;
}

static int keep_stat(struct mc_keeper_conn *conn, const struct keep_config *cfg, const char *name)
{
	static struct mc_keeper_reply rep;
	struct mc_keeper_request req = { .type = MC_KEEPER_STAT };
	int ret;

	snprintf(req.name, sizeof(req.name), "%s", name);
	req.owner_given = cfg->owner_given;
	req.owner_uid = cfg->owner_uid;
	ret = ask(conn, "stat", &req, &rep);
	if (ret)
		return ret;
	if (cfg->json) {
		json_segment(stdout, &rep.segments[0], time(NULL));
		fputc('\n', stdout);
	} else {
		table_header(stdout);
		table_row(stdout, &rep.segments[0], time(NULL));
	}
	return 0;
}

static int keep_release(struct mc_keeper_conn *conn, const struct keep_config *cfg, const char *name)
{
	static struct mc_keeper_reply rep;
	struct mc_keeper_request req = { .type = MC_KEEPER_RELEASE };
	char shown[4 * MC_KEEPER_NAME_MAX + 1];
	int ret;

	snprintf(req.name, sizeof(req.name), "%s", name);
	req.owner_given = cfg->owner_given;
	req.owner_uid = cfg->owner_uid;
	ret = ask(conn, "release", &req, &rep);
	if (ret)
		return ret;
	printf("released uid %u's '%s' (generation %" PRIu64 "): %s\n",
	       (unsigned)(cfg->owner_given ? cfg->owner_uid : (uint32_t)geteuid()),
	       printable(name, shown, sizeof(shown)), rep.generation,
	       rep.release_flags & MC_KEEPER_RELEASE_FREED
		       ? "its pages are freed"
		       : "its pages are freed when the last process that maps it unmaps it; the name is free now");
	return 0;
}

/* A name the keeper would accept, checked here so that the error is ours and exact. */
static bool valid_name(const char *command, const char *name)
{
	char why[128];

	if (strlen(name) <= MC_KEEPER_NAME_MAX && mc_keeper_name_valid(name, strlen(name), why, sizeof(why)))
		return true;
	if (strlen(name) > MC_KEEPER_NAME_MAX)
		snprintf(why, sizeof(why), "segment name is %zu bytes, at most %d", strlen(name),
			 MC_KEEPER_NAME_MAX);
	fprintf(stderr, "%s keep %s: %s\n", PROGRAM, command, why);
	return false;
}

/* --owner UID: a decimal uid, as the keeper's user namespace sees it. */
static bool parse_owner(const char *text, uint32_t *uid)
{
	char *end;
	unsigned long long value;

	errno = 0;
	value = strtoull(text, &end, 10);
	if (!isdigit((unsigned char)text[0]) || *end || errno || value > UINT32_MAX) {
		fprintf(stderr, "%s keep: --owner '%s' is not a uid; give a decimal number (id -u NAME)\n",
			PROGRAM, text);
		return false;
	}
	*uid = (uint32_t)value;
	return true;
}

int cmd_keep(int argc, char **argv)
{
	static const struct option options[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ "owner", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct keep_config cfg = { 0 };
	struct mc_keeper_conn conn;
	const char *command, *name = NULL;
	int c, ret;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (c) {
		case 'j':
			cfg.json = true;
			break;
		case 's':
			cfg.socket = optarg;
			break;
		case 'o':
			if (!parse_owner(optarg, &cfg.owner_uid))
				return 2;
			cfg.owner_given = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	command = argv[optind++];
	if (strcmp(command, "list") != 0 && strcmp(command, "stat") != 0 && strcmp(command, "release") != 0 &&
	    strcmp(command, "health") != 0) {
		fprintf(stderr, "%s keep: unknown command '%s'; use health, list, stat or release\n", PROGRAM,
			command);
		return 2;
	}
	if (strcmp(command, "list") != 0 && strcmp(command, "health") != 0) {
		if (optind >= argc) {
			fprintf(stderr, "%s keep %s: give the segment's NAME\n", PROGRAM, command);
			return 2;
		}
		name = argv[optind++];
		if (!valid_name(command, name))
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "%s keep %s: unexpected argument '%s'\n", PROGRAM, command, argv[optind]);
		return 2;
	}
	if (cfg.owner_given && (!strcmp(command, "list") || !strcmp(command, "health"))) {
		fprintf(stderr, "%s keep %s: --owner is for stat and release\n", PROGRAM, command);
		return 2;
	}
	if (cfg.json && !strcmp(command, "release")) {
		fprintf(stderr, "%s keep release: --json is for list and stat\n", PROGRAM);
		return 2;
	}
	if (mc_keeper_open(&conn, cfg.socket, ANSWER_TIMEOUT_MS) != 0) {
		fprintf(stderr, "%s keep %s: %s\n", PROGRAM, command, mooncake_segment_last_error());
		return 1;
	}
	if (!strcmp(command, "health"))
		ret = keep_health(&conn, &cfg);
	else if (!strcmp(command, "list"))
		ret = keep_list(&conn, &cfg);
	else if (!strcmp(command, "stat"))
		ret = keep_stat(&conn, &cfg, name);
	else
		ret = keep_release(&conn, &cfg, name);
	mc_keeper_close(&conn);
	return ret;
}
