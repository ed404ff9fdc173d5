/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The program check-setuid installs set-user-ID root and runs as another
 * user: it links the library's objects statically (a set-user-ID program
 * ignores LD_LIBRARY_PATH) and says what it sees of each variable the
 * library reads, then asks for host registration, which loads the
 * accelerator runtimes from MOONCAKE_SEGMENT_CUDA_LIBRARY and
 * MOONCAKE_SEGMENT_ASCEND_LIBRARY where they are obeyed.
 */
#include "config.h"

#include <stdio.h>
#include <unistd.h>

#include "internals.h"

int main(void)
{
	static const char *const variables[] = {
		"MOONCAKE_SEGMENT_HOST_ROOT",	    "MOONCAKE_SEGMENT_PEER_UIDS",
		"MOONCAKE_SEGMENT_PEER_TIMEOUT_MS", "MOONCAKE_SEGMENT_CUDA_LIBRARY",
		"MOONCAKE_SEGMENT_ASCEND_LIBRARY",
	};
	const char *value;

	printf("euid=%d uid=%d\n", (int)geteuid(), (int)getuid());
	for (size_t i = 0; i < MC_ARRAY_SIZE(variables); i++) {
		value = mc_env(variables[i]);
		printf("%s=%s\n", variables[i], value ? value : "(unset)");
	}
	printf("host root='%s'\n", mc_host_root());
	printf("host registration: %s\n", mc_accel_for_host_register() ? "available" : "unavailable");
	return 0;
}
