/*
 * tsan_memintrinsics: the three entry points that LLVM's ThreadSanitizer
 * instrumentation calls (rustc's, LLVM 16 and later) and GCC 12's
 * libtsan.so.2 does not have: __tsan_memcpy, __tsan_memmove and
 * __tsan_memset. Each calls the libc function, which libtsan intercepts
 * (so the accesses are still checked). tests/tsan.sh builds this into a
 * small shared object to preload after libtsan.so.2 when an uninstrumented
 * program (ibv_rc_pingpong, rping) loads the instrumented drop-in library.
 * Compile with -fno-builtin, so that the calls are not inlined away from
 * the interceptors.
 */
#include <string.h>

void *__tsan_memcpy(void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}

void *__tsan_memmove(void *dst, const void *src, size_t n)
{
	return memmove(dst, src, n);
}

void *__tsan_memset(void *dst, int c, size_t n)
{
	return memset(dst, c, n);
}
