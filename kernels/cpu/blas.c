/*
 * blas.c - the one place that talks to the BLAS library about threads. The ops call cblas_*
 * and nothing else BLAS-specific; this file knows which BLAS the build found (meson defines
 * CT_HAVE_OPENBLAS for OpenBLAS) and does not try to detect any other library's thread API.
 */
#include "ct_error.h"
#include "ct_kernels.h"

#if CT_HAVE_OPENBLAS
#include <cblas.h> /* OpenBLAS's cblas.h declares openblas_set_num_threads */
#endif

int ct_cpu_set_threads(int n)
{
    if (n < 1)
        return CT_ERANGE_VALUE;
#if CT_HAVE_OPENBLAS
    openblas_set_num_threads(n);
    return 0;
#else
    /* A generic CBLAS gives no thread control; the reference BLAS is single-threaded. */
    return n == 1 ? 0 : CT_ENOTBUILT;
#endif
}
