/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every internal header of the library, for the white-box tests, which link
 * the library's objects directly and may reach any layer (lib/README.md says
 * which layer may include which; tests stand outside those rules).
 */
#ifndef MOONCAKE_SEGMENT_TEST_INTERNALS_H
#define MOONCAKE_SEGMENT_TEST_INTERNALS_H

#include "accel/accel.h"
#include "backends/backend.h"
#include "base/base.h"
#include "base/environment.h"
#include "base/error.h"
#include "base/tracked-fd.h"
#include "host/cgroup.h"
#include "host/commit-lock.h"
#include "host/host.h"
#include "host/limits.h"
#include "host/placement.h"
#include "host/populate.h"
#include "host/procfs.h"
#include "host/window.h"
#include "mooncake/segment.h"
#include "private.h"
#include "route/route.h"
#include "segment/blob.h"
#include "segment/segment.h"

#endif
