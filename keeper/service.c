/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The service manager's side of the keeper (keeper.h).  STUB until the
 * socket activation and descriptor store land: no passed socket, no store,
 * so a restart of the keeper loses what it keeps.
 */
#include "config.h"

#include "keeper.h"

int service_start(void)
{
	return 0;
}

int service_listen_fd(void)
{
	return -1;
}

int service_take(const char *fdname)
{
	(void)fdname;
	return -1;
}

bool service_can_store(void)
{
	return false;
}

int service_store(const char *fdname, int fd)
{
	(void)fdname;
	(void)fd;
	return 0;
}

int service_remove(const char *fdname)
{
	(void)fdname;
	return 0;
}

void service_ready(const char *status)
{
	(void)status;
}

void service_stopping(void)
{
}
