/* SPDX-License-Identifier: Apache-2.0 */
/* Abstract Unix socket names (abstract-socket.h). */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "abstract-socket.h"

socklen_t mc_abstract_address(struct sockaddr_un *addr, const char *format, ...)
{
	size_t room = sizeof(addr->sun_path) - 1;
	va_list args;
	int n;

	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	/* sun_path[0] stays '\0': the abstract namespace. */
	va_start(args, format);
	n = vsnprintf(addr->sun_path + 1, room, format, args);
	va_end(args);
	if (n < 0)
		n = 0;
	/* The address ends where the name does: its bytes, never the NUL vsnprintf adds. */
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			   ((size_t)n < room ? (size_t)n : room - 1));
}
