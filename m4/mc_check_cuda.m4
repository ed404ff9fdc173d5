# MC_CHECK_CUDA
# -------------
# Probe the CUDA driver API header (cuda.h).  Only the header is used at build
# time; the driver (libcuda.so.1) is dlopen'd at run time, so nothing here adds
# a library to LIBS.
#   --with-cuda=guess (default): look in /usr/local/cuda, then the compiler's
#                                own paths; absent is a notice.
#   --with-cuda=yes|DIR:         absent is fatal.
#   --without-cuda:              no CUDA support.
# Defines HAVE_CUDA to 0 or 1, and HAVE_CUDA_VMM to 1 when the header also
# declares the host NUMA virtual memory API (CUDA 12.4 and later) that the
# VMM backend (mmap=false) uses; substitutes CUDA_CPPFLAGS, sets the automake
# conditionals HAVE_CUDA and HAVE_CUDA_VMM and the shell variable mc_cuda_summary.
AC_DEFUN([MC_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
                    [CUDA driver API headers in DIR/include (default: guess /usr/local/cuda, then the compiler's paths)])],
    [], [with_cuda=guess])

  mc_have_cuda=no
  mc_have_cuda_vmm=no
  CUDA_CPPFLAGS=
  AS_CASE([$with_cuda],
    [no], [],
    [yes|guess], [mc_cuda_dirs="/usr/local/cuda none"],
    [mc_cuda_dirs=$with_cuda])

  AS_IF([test "x$with_cuda" != xno], [
    for mc_dir in $mc_cuda_dirs; do
      AS_IF([test "x$mc_dir" = xnone], [mc_cppflags=], [mc_cppflags="-I$mc_dir/include"])
      mc_save_CPPFLAGS=$CPPFLAGS
      CPPFLAGS="$CPPFLAGS $mc_cppflags"
      AS_UNSET([ac_cv_header_cuda_h])
      AC_CHECK_HEADER([cuda.h], [
        AC_CHECK_DECLS([cuMemHostRegister, cuMemHostGetDevicePointer, cuDevicePrimaryCtxRetain,
                        cuDriverGetVersion, cuGetErrorString],
                       [mc_have_cuda=yes], [mc_have_cuda=no], [[#include <cuda.h>]])
        mc_have_cuda_vmm=$mc_have_cuda
        AS_IF([test "x$mc_have_cuda" = xyes], [
          AC_CHECK_DECLS([cuMemCreate, cuMemExportToShareableHandle, cuMemImportFromShareableHandle,
                          CU_MEM_LOCATION_TYPE_HOST_NUMA,
                          CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED],
                         [], [mc_have_cuda_vmm=no], [[#include <cuda.h>]])
        ])
      ])
      CPPFLAGS=$mc_save_CPPFLAGS
      AS_IF([test "x$mc_have_cuda" = xyes], [
        CUDA_CPPFLAGS=$mc_cppflags
        AS_IF([test "x$mc_dir" = xnone], [mc_cuda_where="compiler paths"], [mc_cuda_where=$mc_dir])
        break
      ])
    done
    AS_IF([test "x$mc_have_cuda" = xno], [
      AS_IF([test "x$with_cuda" = xguess],
        [AC_MSG_NOTICE([CUDA headers (cuda.h) not found: building without CUDA host registration])],
        [AC_MSG_ERROR([CUDA support was requested but cuda.h with the driver API was not found in $mc_cuda_dirs; pass --with-cuda=DIR or --without-cuda])])
    ])
  ])

  AS_IF([test "x$mc_have_cuda" = xyes],
    [AC_DEFINE([HAVE_CUDA], [1], [Define to 1 to build CUDA host registration (driver API, dlopen'd)])
     mc_cuda_summary="yes (headers in $mc_cuda_where; runtime dlopen libcuda.so.1; VMM: $mc_have_cuda_vmm)"],
    [AC_DEFINE([HAVE_CUDA], [0], [Define to 1 to build CUDA host registration (driver API, dlopen'd)])
     mc_cuda_summary=no])
  AS_IF([test "x$mc_have_cuda_vmm" = xyes],
    [AC_DEFINE([HAVE_CUDA_VMM], [1], [Define to 1 to build the CUDA host VMM backend (mmap=false)])],
    [AC_DEFINE([HAVE_CUDA_VMM], [0], [Define to 1 to build the CUDA host VMM backend (mmap=false)])])
  AC_SUBST([CUDA_CPPFLAGS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$mc_have_cuda" = xyes])
  AM_CONDITIONAL([HAVE_CUDA_VMM], [test "x$mc_have_cuda_vmm" = xyes])
])
