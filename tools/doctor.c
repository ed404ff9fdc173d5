/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment doctor: a preflight of this node.  Each finding is ok,
 * warn or fail, with what was seen and, where there is one, the fix for a
 * bare host, Docker, Kubernetes and systemd.  Every check tries the real
 * thing (a memfd, a child's /proc/PID/fd, a mempolicy call) rather than
 * trusting a version number.  What the library itself reads (host files
 * under the host root, the memory cgroup's room, the HugeTLB pools, the
 * accelerator runtimes and each device's NUMA node) comes from the library
 * (private.h), so doctor reports what create() would see.  Exit status: 1
 * when any check fails.
 *
 * This file is the command, the findings table and its printers (text and
 * JSON); the checks are by subject: the host's kernel, memory and limits
 * (doctor-host.c), the peer access routes (doctor-peer.c), the accelerators
 * (doctor-accel.c) and the Python binding (doctor-python.c).
 */
#include "config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>

#include <mooncake/segment.h>

#include "cli.h"
#include "doctor.h"

static const char *const status_names[] = { "ok", "warn", "fail" };

struct finding {
	const char *check;
	enum status status;
	char value[768]; /* room for create's whole reason (every VMM backend's) */
	char fix[512];
};

#define MAX_FINDINGS 32
static struct finding findings[MAX_FINDINGS];
static int nfindings;

void doctor_add(const char *check, enum status status, const char *fix, const char *fmt, ...)
{
	struct finding *f = &findings[nfindings < MAX_FINDINGS - 1 ? nfindings++ : nfindings];
	va_list ap;

	f->check = check;
	f->status = status;
	va_start(ap, fmt);
	vsnprintf(f->value, sizeof(f->value), fmt, ap);
	va_end(ap);
	snprintf(f->fix, sizeof(f->fix), "%s", fix ? fix : "");
}

static void print_text(void)
{
	printf("%s doctor (%s)\n\n", PROGRAM, mooncake_segment_version());
	for (int i = 0; i < nfindings; i++) {
		printf("[%-4s] %-15s %s\n", status_names[findings[i].status], findings[i].check,
		       findings[i].value);
		if (findings[i].fix[0])
			printf("       %-15s fix: %s\n", "", findings[i].fix);
	}
}

static void print_json(void)
{
	printf("{\"version\": \"%s\", \"findings\": [", mooncake_segment_version());
	for (int i = 0; i < nfindings; i++) {
		printf("%s\n  {\"check\": ", i ? "," : "");
		json_string(stdout, findings[i].check);
		printf(", \"status\": \"%s\", \"value\": ", status_names[findings[i].status]);
		json_string(stdout, findings[i].value);
		printf(", \"fix\": ");
		json_string(stdout, findings[i].fix);
		printf("}");
	}
	printf("\n]}\n");
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option options[] = { { "json", no_argument, NULL, 'j' },
						 { "help", no_argument, NULL, 'h' },
						 { NULL, 0, NULL, 0 } };
	bool json = false, failed = false;
	int c;

	while ((c = getopt_long(argc, argv, "jh", options, NULL)) != -1) {
		if (c == 'j') {
			json = true;
		} else {
			fprintf(c == 'h' ? stdout : stderr,
				"Usage: %s doctor [--json]\n\n"
				"Check this node for what shared segments need; exit 1 if a check fails.\n",
				PROGRAM);
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s doctor: unexpected argument '%s'; usage: %s doctor [--json]\n", PROGRAM,
			argv[optind], PROGRAM);
		return 2;
	}
	check_kernel();
	check_memfd();
	check_peer_access();
	check_dev_shm();
	check_cgroup();
	check_memlock();
	check_file_size_limit();
	check_thp();
	check_hugetlb();
	check_numa();
	check_cuda();
	check_ascend();
	check_vmm();
	check_python();
	for (int i = 0; i < nfindings; i++)
		failed = failed || findings[i].status == FAIL;
	if (json)
		print_json();
	else
		print_text();
	return failed ? 1 : 0;
}
