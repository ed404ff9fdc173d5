# MC_CHECK_ASCEND
# ---------------
# Probe the Ascend CANN runtime header (acl/acl.h).  Only the header is used at
# build time; the runtime library is dlopen'd at run time.
#   --with-ascend=guess (default): look in $ASCEND_HOME_PATH/include (CANN's own
#                                  convention); absent is a notice.
#   --with-ascend=yes|DIR:         absent is fatal (yes means $ASCEND_HOME_PATH).
#   --without-ascend:              no Ascend support.
# Defines HAVE_ASCEND to 0 or 1, and HAVE_ASCEND_VMM to 1 when the header also
# declares the physical-memory and V2 shareable-handle API (CANN 8.5 and
# later) that the VMM backend (mmap=false) uses, and HAVE_ASCEND_VALUE_OPS to 1
# when it declares the stream memory operations aclrtValueWrite and
# aclrtValueWait (CANN 8.x, Atlas A2/A3) that the publish slots in stream
# order use; substitutes ASCEND_CPPFLAGS, sets the automake conditionals
# HAVE_ASCEND, HAVE_ASCEND_VMM and HAVE_ASCEND_VALUE_OPS and the shell variable
# mc_ascend_summary.
AC_DEFUN([MC_CHECK_ASCEND], [
  AC_ARG_WITH([ascend],
    [AS_HELP_STRING([--with-ascend@<:@=DIR@:>@],
                    [Ascend CANN headers in DIR/include (default: guess $ASCEND_HOME_PATH)])],
    [], [with_ascend=guess])

  mc_have_ascend=no
  mc_have_ascend_vmm=no
  mc_have_ascend_value_ops=no
  ASCEND_CPPFLAGS=
  AS_CASE([$with_ascend],
    [no], [mc_ascend_dir=],
    [yes|guess], [mc_ascend_dir=$ASCEND_HOME_PATH],
    [mc_ascend_dir=$with_ascend])

  AS_IF([test "x$with_ascend" != xno && test -n "$mc_ascend_dir"], [
    mc_save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS -I$mc_ascend_dir/include"
    AC_CHECK_HEADER([acl/acl.h], [
      AC_CHECK_DECLS([aclrtHostRegister, aclrtHostUnregister, aclrtGetDevice, aclrtGetDeviceCount,
                      aclGetRecentErrMsg],
                     [mc_have_ascend=yes], [mc_have_ascend=no], [[#include <acl/acl.h>]])
      AS_IF([test "x$mc_have_ascend" = xyes], [
        mc_have_ascend_vmm=yes
        AC_CHECK_DECLS([aclrtMallocPhysical, aclrtFreePhysical, aclrtReserveMemAddress,
                        aclrtReleaseMemAddress, aclrtMapMem, aclrtUnmapMem, aclrtMemSetAccess,
                        aclrtMemGetAllocationGranularity, aclrtMemExportToShareableHandleV2,
                        aclrtMemImportFromShareableHandleV2, aclrtGetLogicDevIdByUserDevId,
                        ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION],
                       [], [mc_have_ascend_vmm=no], [[#include <acl/acl.h>]])
        dnl Only the functions: the GEQ flag is 0, spelt ACL_VALUE_WAIT_GEQ in
        dnl CANN 8.5's documentation and ACL_STREAM_WAIT_VALUE_GEQ in its headers.
        mc_have_ascend_value_ops=yes
        AC_CHECK_DECLS([aclrtValueWrite, aclrtValueWait],
                       [], [mc_have_ascend_value_ops=no], [[#include <acl/acl.h>]])
      ])
    ])
    CPPFLAGS=$mc_save_CPPFLAGS
  ])
  AS_IF([test "x$mc_have_ascend" = xyes], [ASCEND_CPPFLAGS="-I$mc_ascend_dir/include"])
  AS_IF([test "x$mc_have_ascend" = xno && test "x$with_ascend" != xno], [
    AS_IF([test "x$with_ascend" = xguess],
      [AC_MSG_NOTICE([Ascend headers (acl/acl.h) not found${mc_ascend_dir:+ in $mc_ascend_dir/include}: building without Ascend support])],
      [AC_MSG_ERROR([Ascend support was requested but acl/acl.h was not found${mc_ascend_dir:+ in $mc_ascend_dir/include} (set ASCEND_HOME_PATH or pass --with-ascend=DIR, or --without-ascend)])])
  ])

  AS_IF([test "x$mc_have_ascend" = xyes],
    [AC_DEFINE([HAVE_ASCEND], [1], [Define to 1 to build Ascend registration and VMM (dlopen'd)])
     mc_ascend_summary="yes (headers in $mc_ascend_dir/include; runtime dlopen; VMM: $mc_have_ascend_vmm; stream order: $mc_have_ascend_value_ops)"],
    [AC_DEFINE([HAVE_ASCEND], [0], [Define to 1 to build Ascend registration and VMM (dlopen'd)])
     mc_ascend_summary=no])
  AS_IF([test "x$mc_have_ascend_vmm" = xyes],
    [AC_DEFINE([HAVE_ASCEND_VMM], [1], [Define to 1 to build the Ascend VMM backend (mmap=false)])],
    [AC_DEFINE([HAVE_ASCEND_VMM], [0], [Define to 1 to build the Ascend VMM backend (mmap=false)])])
  AS_IF([test "x$mc_have_ascend_value_ops" = xyes],
    [AC_DEFINE([HAVE_ASCEND_VALUE_OPS], [1], [Define to 1 when the Ascend headers declare aclrtValueWrite and aclrtValueWait])],
    [AC_DEFINE([HAVE_ASCEND_VALUE_OPS], [0], [Define to 1 when the Ascend headers declare aclrtValueWrite and aclrtValueWait])])
  AC_SUBST([ASCEND_CPPFLAGS])
  AM_CONDITIONAL([HAVE_ASCEND], [test "x$mc_have_ascend" = xyes])
  AM_CONDITIONAL([HAVE_ASCEND_VMM], [test "x$mc_have_ascend_vmm" = xyes])
  AM_CONDITIONAL([HAVE_ASCEND_VALUE_OPS], [test "x$mc_have_ascend_value_ops" = xyes])
])
