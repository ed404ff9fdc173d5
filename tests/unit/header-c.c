/* SPDX-License-Identifier: Apache-2.0 */
/* The public header compiles on its own as strict C99 (-pedantic -Werror). */
#include <mooncake/segment.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment_info info;

	mooncake_segment_options_init(&opt);
	memset(&info, 0, sizeof(info));
	(void)info;
	printf("1..1\n%s 1 - <mooncake/segment.h> as C, library %s\n", opt.world_size == 1 ? "ok" : "not ok",
	       mooncake_segment_version());
	return 0;
}
