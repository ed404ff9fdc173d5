/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Names in the abstract Unix socket namespace (abstract-socket.c): the
 * socket route's "mooncake-segment/<id>" and the commit lock's
 * "mooncake-segment/memcg/<dev>:<ino>".  A name there has no file; it is
 * gone with the last descriptor bound to it.
 */
#ifndef MOONCAKE_SEGMENT_ABSTRACT_SOCKET_H
#define MOONCAKE_SEGMENT_ABSTRACT_SOCKET_H

#include <sys/socket.h>
#include <sys/un.h>

/* Fill @addr with the abstract name printf(@format, ...) (sun_path[0] is
 * '\0', the name follows without a terminator); returns the address length
 * for bind() and connect(). */
socklen_t mc_abstract_address(struct sockaddr_un *addr, const char *format, ...)
	__attribute__((format(printf, 2, 3)));

#endif
