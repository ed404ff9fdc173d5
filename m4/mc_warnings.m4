# MC_TRY_CFLAG(FLAG, VARIABLE)
# ----------------------------
# Append FLAG to VARIABLE when the C compiler accepts it (as an error, so that
# unknown -W options are not silently kept).
AC_DEFUN([MC_TRY_CFLAG], [
  AS_VAR_PUSHDEF([mc_cache], [mc_cv_cflag_$1])
  AC_CACHE_CHECK([whether $CC accepts $1], [mc_cache], [
    mc_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS -Werror $1"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])], [AS_VAR_SET([mc_cache], [yes])], [AS_VAR_SET([mc_cache], [no])])
    CFLAGS=$mc_save_CFLAGS])
  AS_VAR_IF([mc_cache], [yes], [$2="$$2 $1"])
  AS_VAR_POPDEF([mc_cache])
])

# MC_COMPILER_WARNINGS
# --------------------
# Warnings always on, probed into WARN_CFLAGS; --enable-werror adds -Werror.
AC_DEFUN([MC_COMPILER_WARNINGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors])],
    [], [enable_werror=no])
  WARN_CFLAGS=
  for mc_flag in -Wall -Wextra -Wundef -Wmissing-prototypes -Wstrict-prototypes -Wvla \
                 -Wshadow -Wformat=2 -Wpointer-arith -Wwrite-strings -Wcast-align \
                 -Wmissing-declarations -Wnull-dereference -Wimplicit-fallthrough; do
    MC_TRY_CFLAG([$mc_flag], [WARN_CFLAGS])
  done
  AS_IF([test "x$enable_werror" = xyes], [WARN_CFLAGS="$WARN_CFLAGS -Werror"])
  AC_SUBST([WARN_CFLAGS])
])

# MC_SANITIZERS
# -------------
# --enable-asan and --enable-ubsan build everything (library, extension, tests)
# with the sanitizer; SANITIZER_CFLAGS/LDFLAGS are added to AM_CFLAGS/AM_LDFLAGS.
AC_DEFUN([MC_SANITIZERS], [
  AC_ARG_ENABLE([asan],
    [AS_HELP_STRING([--enable-asan], [build with AddressSanitizer])], [], [enable_asan=no])
  AC_ARG_ENABLE([ubsan],
    [AS_HELP_STRING([--enable-ubsan], [build with UndefinedBehaviorSanitizer])], [], [enable_ubsan=no])
  SANITIZER_CFLAGS=
  mc_sanitize=
  AS_IF([test "x$enable_asan" = xyes], [mc_sanitize=address])
  AS_IF([test "x$enable_ubsan" = xyes], [mc_sanitize="${mc_sanitize:+$mc_sanitize,}undefined"])
  AS_IF([test -n "$mc_sanitize"], [
    mc_save_CFLAGS=$CFLAGS; mc_save_LDFLAGS=$LDFLAGS
    CFLAGS="$CFLAGS -fsanitize=$mc_sanitize"; LDFLAGS="$LDFLAGS -fsanitize=$mc_sanitize"
    AC_MSG_CHECKING([whether $CC links with -fsanitize=$mc_sanitize])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); AC_MSG_ERROR([the compiler cannot build with -fsanitize=$mc_sanitize (install libasan/libubsan)])])
    CFLAGS=$mc_save_CFLAGS; LDFLAGS=$mc_save_LDFLAGS
    SANITIZER_CFLAGS="-fsanitize=$mc_sanitize -fno-omit-frame-pointer -fno-sanitize-recover=all"
  ])
  AC_SUBST([SANITIZER_CFLAGS])
  AM_CONDITIONAL([ENABLE_ASAN], [test "x$enable_asan" = xyes])
])
