/* tests/c/check.h - the reporting every C test program in tests/c shares.
 *
 * Each check prints one line, "ok NAME" or "FAIL NAME: why", and counts
 * itself in `passed` or `failed`; the Rust test that runs the program
 * reads those lines and the program's exit code (main returns failed != 0).
 * The counters are atomic and a FAIL line is printed whole, so threads may
 * check at the same time (verbs_threads.c, rdmacm_threads.c).
 */
#ifndef RXE_TESTS_CHECK_H
#define RXE_TESTS_CHECK_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int passed, failed;

/* Counts and prints one check; returns cond. */
__attribute__((format(printf, 3, 4), unused)) static int check(int cond, const char *name,
								const char *fmt, ...)
{
	va_list ap;

	if (cond) {
		printf("ok %s\n", name);
		passed++;
		return 1;
	}
	flockfile(stdout);
	printf("FAIL %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	funlockfile(stdout);
	failed++;
	return 0;
}

#endif
