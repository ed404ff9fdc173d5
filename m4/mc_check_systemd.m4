# MC_CHECK_SYSTEMD
# ----------------
# libsystemd for mooncake-segmentd alone (socket activation and the file
# descriptor store, so that a restart of the keeper keeps its segments); the
# library never links it.
#   --with-systemd=auto (default): use libsystemd >= 221 when pkg-config finds
#                                  it; absent is a notice (the keeper then
#                                  says that its restart loses kept segments).
#   --with-systemd=yes:            absent is fatal.
#   --without-systemd:             no libsystemd.
# 221 is the first release with sd_listen_fds_with_names() and
# sd_pid_notify_with_fds() as used here (FDNAME=, FDSTOREREMOVE=1 are
# messages, not symbols: the service manager, not this library, must know them).
# Defines HAVE_LIBSYSTEMD to 0 or 1, substitutes SYSTEMD_CFLAGS and
# SYSTEMD_LIBS, sets the automake conditional HAVE_LIBSYSTEMD and the shell
# variable mc_systemd_summary.
#
# Also --with-systemdsystemunitdir=DIR|no: where the systemd units go (the
# keeper's service and socket, the textfile timer); default
# ${prefix}/lib/systemd/system, so that a non-root install and distcheck stay
# under the prefix (Debian passes /lib/systemd/system, RPM %{_unitdir}).
# Substitutes systemdunitdir; automake conditional HAVE_SYSTEMDUNITDIR.
AC_DEFUN([MC_CHECK_SYSTEMD], [
  AC_REQUIRE([PKG_PROG_PKG_CONFIG])
  AC_ARG_WITH([systemd],
    [AS_HELP_STRING([--with-systemd@<:@=auto|yes|no@:>@],
                    [link mooncake-segmentd with libsystemd >= 221 for socket activation and the descriptor store (default: auto)])],
    [], [with_systemd=auto])
  AS_CASE([$with_systemd],
    [auto|yes|no], [],
    [AC_MSG_ERROR([--with-systemd takes auto, yes or no, not '$with_systemd'])])

  mc_have_libsystemd=no
  SYSTEMD_CFLAGS=
  SYSTEMD_LIBS=
  AS_IF([test "x$with_systemd" != xno], [
    PKG_CHECK_MODULES([SYSTEMD], [libsystemd >= 221], [mc_have_libsystemd=yes], [
      AS_IF([test "x$with_systemd" = xyes],
        [AC_MSG_ERROR([libsystemd >= 221 was requested but not found: install libsystemd-dev (Debian) or systemd-devel (Fedora), or pass --without-systemd])],
        [AC_MSG_NOTICE([libsystemd >= 221 not found: mooncake-segmentd is built without socket activation and the descriptor store, so its own restart loses kept segments])])
    ])
  ])
  AS_IF([test "x$mc_have_libsystemd" = xyes],
    [AC_DEFINE([HAVE_LIBSYSTEMD], [1], [Define to 1 to link mooncake-segmentd with libsystemd])
     mc_systemd_summary="yes (libsystemd `$PKG_CONFIG --modversion libsystemd 2>/dev/null`; mooncake-segmentd only)"],
    [AC_DEFINE([HAVE_LIBSYSTEMD], [0], [Define to 1 to link mooncake-segmentd with libsystemd])
     mc_systemd_summary="no (mooncake-segmentd: a restart loses kept segments)"])
  AC_SUBST([SYSTEMD_CFLAGS])
  AC_SUBST([SYSTEMD_LIBS])
  AM_CONDITIONAL([HAVE_LIBSYSTEMD], [test "x$mc_have_libsystemd" = xyes])

  AC_ARG_WITH([systemdsystemunitdir],
    [AS_HELP_STRING([--with-systemdsystemunitdir=DIR],
                    [install the systemd units into DIR, or not at all with no (default: PREFIX/lib/systemd/system)])],
    [], [with_systemdsystemunitdir='${prefix}/lib/systemd/system'])
  AS_CASE([$with_systemdsystemunitdir],
    [yes|''], [with_systemdsystemunitdir='${prefix}/lib/systemd/system'])
  AS_IF([test "x$with_systemdsystemunitdir" != xno],
        [AC_SUBST([systemdunitdir], [$with_systemdsystemunitdir])])
  AM_CONDITIONAL([HAVE_SYSTEMDUNITDIR], [test "x$with_systemdsystemunitdir" != xno])
])
