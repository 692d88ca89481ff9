/*
 * diff_lines.h: the output of the differential harnesses (verbs_diff.c,
 * rdmacm_diff.c): one canonical "CASE-ID: RESULT" line per case, errno
 * values by name, and a watchdog for a call that never returns.
 * tests/interop/verbs_diff.py compares two runs of either.
 */
#ifndef RXE_DIFF_LINES_H
#define RXE_DIFF_LINES_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static const char *ename(int e)
{
	switch (e) {
	case 0: return "0";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EINTR: return "EINTR";
	case EIO: return "EIO";
	case E2BIG: return "E2BIG";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC";
	case ERANGE: return "ERANGE";
	case ENOSYS: return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case ENETUNREACH: return "ENETUNREACH";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EOVERFLOW: return "EOVERFLOW";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EADDRINUSE: return "EADDRINUSE";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ECONNRESET: return "ECONNRESET";
	case EHOSTUNREACH: return "EHOSTUNREACH";
	case EISCONN: return "EISCONN";
	case ENOTCONN: return "ENOTCONN";
	case ENODATA: return "ENODATA";
	case ESRCH: return "ESRCH";
	default: {
		static char buf[16];
		snprintf(buf, sizeof buf, "E%d", e);
		return buf;
	}
	}
}

__attribute__((format(printf, 2, 3))) static void line(const char *id, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", id);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* The id buffer cases are named in. */
static char idb[256];
__attribute__((format(printf, 1, 2))) static const char *ID(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(idb, sizeof idb, fmt, ap);
	va_end(ap);
	return idb;
}

/* A verb that returns 0 or an errno value (ibv_modify_qp, ibv_post_*, ...),
 * or -1 with errno set (some of the query helpers). */
static void rc_line(const char *id, int rc)
{
	if (rc == 0)
		line(id, "ok");
	else if (rc < 0)
		line(id, "err %s", ename(errno));
	else
		line(id, "err %s", ename(rc));
}

__attribute__((unused)) static void null_line(const char *id)
{
	line(id, "null %s", ename(errno));
}

static void hang(int sig)
{
	(void)sig;
	static const char msg[] = "HANG: a verb did not return within the watchdog's time\n";
	if (write(1, msg, sizeof msg - 1) < 0) {
	}
	_exit(3);
}

static void watchdog(unsigned secs)
{
	signal(SIGALRM, hang);
	alarm(secs);
}

#endif
