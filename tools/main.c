/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment: the command-line tool.  demo shows one physical copy
 * shared by forked ranks, doctor checks a node, info tells what this build
 * and host support, bench measures commit and import against the limits,
 * list shows every segment on the host, keep the node keeper's.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <mooncake/segment.h>

#include "cli.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "demo", cmd_demo, "fork ranks that share one segment and show the single copy" },
	{ "doctor", cmd_doctor, "check this node for what shared segments need, with fixes" },
	{ "info", cmd_info, "version, and what this build and this host support" },
	{ "bench", cmd_bench, "measure commit and import against the physical limits" },
	{ "list", cmd_list, "every segment on this host: owner, mappers, resident bytes per node" },
	{ "keep", cmd_keep, "the segments the node keeper holds: list, stat, release" },
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: %s COMMAND [OPTIONS]\n\n"
		"Share one physical copy of host memory between the ranks of a process group.\n\n"
		"Commands:\n",
		PROGRAM);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(out,
		"\n  %s COMMAND --help   options of a command\n"
		"  %s --version        the library version\n\n"
		"See mooncake-segment(1).\n",
		PROGRAM, PROGRAM);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("%s %s\n", PROGRAM, mooncake_segment_version());
		return finish_output(stdout, "the version");
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name)) {
			int ret = commands[i].run(argc - 1, argv + 1);

			/* Every command's output is checked once it is all written (list
			 * checks its own, and stops there on a failure). */
			return ret ? ret : finish_output(stdout, "the output");
		}
	fprintf(stderr, "%s: unknown command '%s'\n\n", PROGRAM, argv[1]);
	usage(stderr);
	return 2;
}
