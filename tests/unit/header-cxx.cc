// SPDX-License-Identifier: Apache-2.0
// The public header compiles and links as C++ (-Wall -Wextra -pedantic -Werror).
#include <mooncake/segment.h>
#include <cstdio>

int main()
{
	mooncake_segment_options opt;
	mooncake_segment_options_init(&opt);
	std::printf("1..1\n%s 1 - <mooncake/segment.h> as C++, supported(mmap)=%d\n",
		    opt.mmap ? "ok" : "not ok", mooncake_segment_supported(true, false, false));
	return 0;
}
