# MC_PYTHON_SITEDIR
# -----------------
# Choose where the mooncake package is installed so that $PYTHON imports it.
# automake's default on Debian is .../site-packages, which the system Python
# never reads; Debian's own scheme is dist-packages.  --with-python-sitedir=DIR
# overrides (the RPM spec passes %{python3_sitearch}).
AC_DEFUN([MC_PYTHON_SITEDIR], [
  AC_ARG_WITH([python-sitedir],
    [AS_HELP_STRING([--with-python-sitedir=DIR],
                    [install the mooncake Python package into DIR (default: where $PYTHON imports from)])],
    [], [with_python_sitedir=auto])
  AS_IF([test "x$with_python_sitedir" = xauto], [
    AS_IF([$PYTHON -c 'import sys, sysconfig; sys.exit("deb_system" not in sysconfig.get_scheme_names())' 2>/dev/null],
      [AS_IF([test "x$prefix" = xNONE || test "x$prefix" = x/usr/local],
         [with_python_sitedir='${prefix}/lib/python'$PYTHON_VERSION'/dist-packages'],
         [with_python_sitedir='${prefix}/lib/python3/dist-packages'])],
      [with_python_sitedir=no])])
  AS_IF([test "x$with_python_sitedir" != xno && test "x$with_python_sitedir" != xyes], [
    AC_SUBST([pythondir], [$with_python_sitedir])
    AC_SUBST([pyexecdir], [$with_python_sitedir])
  ])
])
