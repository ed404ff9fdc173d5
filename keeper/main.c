/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segmentd's start and stop (keeper.h): the options, one log line
 * per event on stderr, the signals (SIGTERM and SIGINT stop it cleanly
 * through a signalfd, SIGPIPE is ignored), the open file limit raised for
 * two descriptors a segment, and the socket it bound removed at the end
 * (never one the service manager passed).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keeper.h"

static void usage(FILE *out)
{
	fprintf(out, "Usage: mooncake-segmentd [OPTIONS]\n"
		     "Keep named shared segments (memfds) past the processes that map them, and hand\n"
		     "them to the processes allowed, over a Unix socket (doc/keeper-protocol.md).\n"
		     "\n"
		     "  --socket PATH          the socket (default " MC_KEEPER_DEFAULT_SOCKET ");\n"
		     "                         its directory is made (0755) when missing\n"
		     "  --budget BYTES         most bytes kept in all, K/M/G/T suffixes (default: no limit)\n"
		     "  --max-segments N       most segments kept (default 1024, at most 65536)\n"
		     "  --uid-budget BYTES     most bytes one uid keeps (default: three quarters of\n"
		     "                         --budget, or of the node's memory; 0: no limit)\n"
		     "  --uid-max-segments N   most segments one uid keeps (default: a quarter of\n"
		     "                         --max-segments, at least 1)\n"
		     "  --max-connections N    most clients at once (default 256)\n"
		     "  --max-connections-per-uid N\n"
		     "                         most clients of one uid at once (default: a quarter\n"
		     "                         of --max-connections, at least 1)\n"
		     "                         Per-uid limits count a user's subordinate uids and\n"
		     "                         user namespaces with the user (doc/keeper.md)\n"
		     "  --idle-timeout SECONDS free a segment nobody mapped this long (default 0: never)\n"
		     "  --socket-mode OCTAL    the socket's mode (default 0666: the directory gates)\n"
		     "  --max-commits N        cold creates committing at once, each on a thread of\n"
		     "                         its own (default 2); more wait in a queue\n"
		     "  --uid-max-commits N    of them, most of one uid at once (default 1)\n"
		     "  --subuid-file PATH     the subordinate uid ranges whose uids count in their\n"
		     "                         user's per-uid limits (default " ACCOUNT_SUBUID_DEFAULT ";\n"
		     "                         another path for a keeper in a container, or tests)\n"
		     "  --help, --version\n");
}

/* "4G", "512M", "1048576": bytes, false on junk or overflow. */
static bool parse_bytes(const char *text, uint64_t *out)
{
	char *end;
	unsigned long long value;
	unsigned int shift = 0;

	errno = 0;
	if (!*text || *text == '-')
		return false;
	value = strtoull(text, &end, 10);
	if (errno || end == text)
		return false;
	switch (*end) {
	case '\0':
		break;
	case 'K':
	case 'k':
		shift = 10;
		break;
	case 'M':
	case 'm':
		shift = 20;
		break;
	case 'G':
	case 'g':
		shift = 30;
		break;
	case 'T':
	case 't':
		shift = 40;
		break;
	default:
		return false;
	}
	if (*end && end[1] && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
		return false;
	if (shift && value > (UINT64_MAX >> shift))
		return false;
	*out = (uint64_t)value << shift;
	return true;
}

static bool parse_u32(const char *text, int base, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long value;

	errno = 0;
	if (!*text || *text == '-')
		return false;
	value = strtoul(text, &end, base);
	if (errno || *end || value > max)
		return false;
	*out = (uint32_t)value;
	return true;
}

/* Each create and release saves the whole table: 65536 keeps that near 30
 * ms (doc/keeper.md, "Costs").  Up to 0.2 took 1048576: a unit written for
 * it still starts, with the most this keeper takes, and says so. */
#define KEEPER_SEGMENTS_MAX 65536u

static uint32_t at_most_segments(const char *option, uint32_t asked)
{
	if (asked <= KEEPER_SEGMENTS_MAX)
		return asked;
	keeper_say(KEEPER_LOG_WARNING,
		   "%s %u is above %u, the most segments one keeper keeps (each create and release saves "
		   "the whole table); keeping at most %u: run more keepers for more",
		   option, asked, KEEPER_SEGMENTS_MAX, KEEPER_SEGMENTS_MAX);
	return KEEPER_SEGMENTS_MAX;
}

static int bad_option(const char *option, const char *value, const char *expected)
{
	keeper_log("%s '%s' is not %s; see mooncake-segmentd --help", option, value, expected);
	return 2;
}

/* Fair defaults: one uid alone cannot take every connection, every table
 * entry or every byte and lock the others out (doc/keeper.md "Tenants").
 * Connections and entries are cheap and one engine needs few: a quarter
 * each.  Bytes are what a node's main tenant keeps its KV cache in: three
 * quarters of the budget, or of the node's memory without one, so another
 * user still finds a quarter. */
static void share_between_uids(struct keeper_config *config)
{
	uint64_t node = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t total = config->budget_bytes ? config->budget_bytes : node;

	if (!config->max_per_uid)
		config->max_per_uid = config->max_connections >= 4 ? config->max_connections / 4 : 1;
	if (!config->uid_max_segments)
		config->uid_max_segments = config->max_segments >= 4 ? config->max_segments / 4 : 1;
	if (!config->uid_budget_set)
		config->uid_budget_bytes = total / 4 * 3;
}

/* 0: go on; else the exit status. */
static int parse_options(int argc, char **argv, struct keeper_config *config, bool *done)
{
	enum {
		OPT_SOCKET = 256,
		OPT_BUDGET,
		OPT_MAX_SEGMENTS,
		OPT_UID_BUDGET,
		OPT_UID_MAX_SEGMENTS,
		OPT_MAX_CONNECTIONS,
		OPT_MAX_PER_UID,
		OPT_IDLE,
		OPT_MODE,
		OPT_SILENT,
		OPT_SCAN_CACHE,
		OPT_MAX_COMMITS,
		OPT_UID_MAX_COMMITS,
		OPT_SUBUID_FILE,
		OPT_HELP,
		OPT_VERSION
	};
	static const struct option options[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "budget", required_argument, NULL, OPT_BUDGET },
		{ "max-segments", required_argument, NULL, OPT_MAX_SEGMENTS },
		{ "uid-budget", required_argument, NULL, OPT_UID_BUDGET },
		{ "uid-max-segments", required_argument, NULL, OPT_UID_MAX_SEGMENTS },
		{ "max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS },
		{ "max-connections-per-uid", required_argument, NULL, OPT_MAX_PER_UID },
		{ "idle-timeout", required_argument, NULL, OPT_IDLE },
		{ "socket-mode", required_argument, NULL, OPT_MODE },
		{ "max-commits", required_argument, NULL, OPT_MAX_COMMITS },
		{ "uid-max-commits", required_argument, NULL, OPT_UID_MAX_COMMITS },
		{ "subuid-file", required_argument, NULL, OPT_SUBUID_FILE },
		/* Not in --help: the tests wait for it in seconds, not 10 s. */
		{ "silent-timeout-ms", required_argument, NULL, OPT_SILENT },
		/* Not in --help either: a test counts scans without racing the clock. */
		{ "scan-cache-ms", required_argument, NULL, OPT_SCAN_CACHE },
		{ "help", no_argument, NULL, OPT_HELP },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t value;
	int opt;

	*done = false;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case OPT_SOCKET:
			if (!*optarg)
				return bad_option("--socket", optarg, "a path");
			config->socket_path = optarg;
			break;
		case OPT_BUDGET:
			if (!parse_bytes(optarg, &config->budget_bytes))
				return bad_option("--budget", optarg,
						  "a size in bytes (like 64G, 512M or 1048576)");
			break;
		case OPT_MAX_SEGMENTS:
			if (!parse_u32(optarg, 10, 1u << 20, &config->max_segments) || !config->max_segments)
				return bad_option("--max-segments", optarg, "a number from 1 to 1048576");
			config->max_segments = at_most_segments("--max-segments", config->max_segments);
			break;
		case OPT_UID_BUDGET:
			config->uid_budget_set = true;
			if (!parse_bytes(optarg, &config->uid_budget_bytes))
				return bad_option("--uid-budget", optarg,
						  "a size in bytes (like 16G, 512M or 1048576)");
			break;
		case OPT_UID_MAX_SEGMENTS:
			if (!parse_u32(optarg, 10, 1u << 20, &config->uid_max_segments) ||
			    !config->uid_max_segments)
				return bad_option("--uid-max-segments", optarg, "a number from 1 to 1048576");
			config->uid_max_segments =
				at_most_segments("--uid-max-segments", config->uid_max_segments);
			break;
		case OPT_MAX_CONNECTIONS:
			if (!parse_u32(optarg, 10, 1u << 16, &config->max_connections) ||
			    !config->max_connections)
				return bad_option("--max-connections", optarg, "a number from 1 to 65536");
			break;
		case OPT_MAX_PER_UID:
			if (!parse_u32(optarg, 10, 1u << 16, &config->max_per_uid) || !config->max_per_uid)
				return bad_option("--max-connections-per-uid", optarg,
						  "a number from 1 to 65536");
			break;
		case OPT_IDLE:
			if (!parse_u32(optarg, 10, UINT32_MAX / 1000, &config->idle_timeout_s))
				return bad_option("--idle-timeout", optarg, "a number of seconds (0: never)");
			break;
		case OPT_MODE:
			if (!parse_u32(optarg, 8, 0777, &value))
				return bad_option("--socket-mode", optarg, "an octal mode like 0660");
			config->socket_mode = (mode_t)value;
			break;
		case OPT_SILENT:
			if (!parse_u32(optarg, 10, 3600000, &config->silent_timeout_ms) ||
			    !config->silent_timeout_ms)
				return bad_option("--silent-timeout-ms", optarg,
						  "a number of milliseconds from 1");
			break;
		case OPT_SCAN_CACHE:
			if (!parse_u32(optarg, 10, 3600000, &config->scan_cache_ms))
				return bad_option("--scan-cache-ms", optarg, "a number of milliseconds");
			break;
		case OPT_MAX_COMMITS:
			if (!parse_u32(optarg, 10, 256, &config->max_commits) || !config->max_commits)
				return bad_option("--max-commits", optarg, "a number from 1 to 256");
			break;
		case OPT_UID_MAX_COMMITS:
			if (!parse_u32(optarg, 10, 256, &config->uid_max_commits) || !config->uid_max_commits)
				return bad_option("--uid-max-commits", optarg, "a number from 1 to 256");
			break;
		case OPT_SUBUID_FILE:
			if (!*optarg)
				return bad_option("--subuid-file", optarg, "a path");
			config->subuid_file = optarg;
			break;
		case OPT_HELP:
			usage(stdout);
			*done = true;
			return 0;
		case OPT_VERSION:
			printf("mooncake-segmentd %s (keeper protocol %d)\n", PACKAGE_VERSION,
			       MC_KEEPER_VERSION);
			*done = true;
			return 0;
		default:
			keeper_log("unknown option '%s'; see mooncake-segmentd --help", argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		keeper_log("unexpected argument '%s'; see mooncake-segmentd --help", argv[optind]);
		return 2;
	}
	share_between_uids(config);
	return 0;
}

/* Two descriptors a segment, one for each group control area it
 * remembers, and one a connection: take the hard limit. */
static void raise_file_limit(const struct keeper_config *config)
{
	uint64_t want = (2 + MC_KEEPER_GROUPS_PER_SEGMENT) * (uint64_t)config->max_segments +
			config->max_connections + 64;
	struct rlimit limit;

	if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
		return;
	if (limit.rlim_cur < limit.rlim_max) {
		limit.rlim_cur = limit.rlim_max;
		setrlimit(RLIMIT_NOFILE, &limit);
		getrlimit(RLIMIT_NOFILE, &limit);
	}
	if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < want)
		keeper_log(
			"the open file limit is %llu, below the %llu that --max-segments %u and --max-connections "
			"%u may need; raise it (LimitNOFILE=, ulimit -n) or lower those",
			(unsigned long long)limit.rlim_cur, (unsigned long long)want, config->max_segments,
			config->max_connections);
}

/* Remove the socket at @path only if it is still the one bound here. */
static void remove_socket(const char *path, const struct stat *bound)
{
	struct stat now;

	if (lstat(path, &now) == 0 && now.st_dev == bound->st_dev && now.st_ino == bound->st_ino)
		unlink(path);
}

int main(int argc, char **argv)
{
	struct keeper_config config = {
		.socket_path = MC_KEEPER_DEFAULT_SOCKET,
		.max_segments = 1024,
		.max_connections = 256,
		.silent_timeout_ms = 10000,
		.scan_cache_ms = 1000,
		.socket_mode = 0666,
		.max_commits = 2,
		.uid_max_commits = 1,
	};
	struct stat bound = { 0 };
	char budget[32] = "none", uid_budget[32] = "none";
	bool done, bound_here;
	sigset_t stop;
	int status, listen_fd, signal_fd, err;

	status = parse_options(argc, argv, &config, &done);
	if (status || done)
		return status;
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	signal_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
	if (signal_fd < 0) {
		keeper_log("cannot make a signalfd: %s", strerror(errno));
		return 1;
	}
	raise_file_limit(&config);
	err = service_start();
	if (err) {
		keeper_log("cannot read what the service manager passed: %s", strerror(-err));
		return 1;
	}
	/* Before the store is read and the socket listens: whoever sees it
	 * listen sees this notice. */
	user_namespace_start();
	account_start(config.subuid_file);
	if (committer_start(&config) != 0 || scanner_start() != 0 || store_start(&config) != 0)
		return 1;
	listen_fd = server_listen(&config, &bound_here);
	if (listen_fd < 0) {
		store_stop();
		return 1;
	}
	if (bound_here)
		lstat(config.socket_path, &bound);
	if (config.budget_bytes)
		snprintf(budget, sizeof(budget), "%" PRIu64 " bytes", config.budget_bytes);
	if (config.uid_budget_bytes)
		snprintf(uid_budget, sizeof(uid_budget), "%" PRIu64 " bytes", config.uid_budget_bytes);
	keeper_log("listening on %s (pid %d, budget %s, at most %u segments; each uid: budget %s, at most %u "
		   "segments, %u connections)",
		   bound_here ? config.socket_path : "the socket the service manager passed", (int)getpid(),
		   budget, config.max_segments, uid_budget, config.uid_max_segments, config.max_per_uid);
	service_ready("listening");
	err = server_run(&config, listen_fd, signal_fd);
	store_flush();
	service_stopping();
	if (bound_here)
		remove_socket(config.socket_path, &bound);
	close(listen_fd);
	close(signal_fd);
	store_stop();
	committer_stop();
	scanner_stop();
	keeper_log("stopped");
	return err ? 1 : 0;
}
