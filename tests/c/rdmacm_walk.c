/*
 * rdmacm_walk: a walk through the librdmacm API (ids, resolution, QPs, and
 * connections between the two soft devices of one process over the
 * connection manager protocol), compiled against Debian's <rdma/rdma_cma.h> (rdma-core
 * 44), linked with -lrdmacm -libverbs, and run over the drop-in library of
 * rxe-rs, which is both librdmacm.so.1 and libibverbs.so.1
 * (tests/rdmacm_walk.rs builds and runs it).
 *
 * One process, soft devices rxe0=127.0.6.1 and rxe1=127.0.6.2
 * (RXE_DEVICES). Every check prints "ok NAME" or "FAIL NAME: details"; the
 * last line is "N passed, M failed", and the exit status is nonzero when a
 * check failed. Lines starting with "#" are information.
 *
 * Usage: rdmacm_walk LIBPATH
 *   LIBPATH  the real path of the drop-in library
 * Addresses: 127.0.6.1-127.0.6.50 only; ports: 19600-19649 only. The
 * checks of an address no soft device has use 192.0.2.1 (TEST-NET-1): the
 * library only asks the kernel whether it is local and how it is routed
 * (bind and connect of a UDP socket), and no packet is sent.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "check.h"

/* ---- reporting ----------------------------------------------------------- */

static const char *volatile current_section = "start";

/* A call that must fail: ret == want_ret and errno == want_errno. */
static void fails_with(const char *name, int ret, int err, int want_ret, int want_errno)
{
	check(ret == want_ret && err == want_errno, name, "returned %d errno %d (%s), want %d errno %d (%s)",
	      ret, err, strerror(err), want_ret, want_errno, strerror(want_errno));
}

#define FAILS(name, call, want_errno)                                         \
	do {                                                                  \
		errno = 0;                                                    \
		int r_ = (call);                                              \
		int e_ = errno;                                               \
		fails_with(name, r_, e_, -1, want_errno);                     \
	} while (0)

#define OK0(name, call)                                                       \
	do {                                                                  \
		errno = 0;                                                    \
		int r_ = (call);                                              \
		int e_ = errno;                                               \
		check(r_ == 0, name, "returned %d errno %d (%s)", r_, e_,     \
		      strerror(e_));                                          \
	} while (0)

__attribute__((format(printf, 1, 2))) static void info(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static void section(const char *s)
{
	current_section = s;
	printf("# == %s\n", s);
}

static void watchdog(int sig)
{
	char msg[256];
	int n;

	(void)sig;
	n = snprintf(msg, sizeof msg, "FAIL watchdog: still in section %s after 60 s\n",
		     (const char *)current_section);
	if (write(1, msg, n) < 0)
		_exit(3);
	_exit(2);
}

/* ---- helpers ------------------------------------------------------------- */

static struct sockaddr_in sin4(const char *ip, int port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof s);
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

#define SA(x) ((struct sockaddr *)&(x))

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static int gid_is(const union ibv_gid *g, const char *ip4)
{
	union ibv_gid want;
	struct in_addr a;

	memset(&want, 0, sizeof want);
	want.raw[10] = 0xff;
	want.raw[11] = 0xff;
	inet_pton(AF_INET, ip4, &a);
	memcpy(&want.raw[12], &a, 4);
	return memcmp(g, &want, sizeof want) == 0;
}

static const char *ip_of(const struct sockaddr *sa, char *buf)
{
	if (sa->sa_family == AF_INET)
		return inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, 64);
	if (sa->sa_family == AF_INET6)
		return inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, 64);
	snprintf(buf, 64, "(family %d)", sa->sa_family);
	return buf;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

/* Takes one event of the channel and checks its type and id. */
static struct rdma_cm_event *expect_event(const char *name, struct rdma_event_channel *ch,
					  struct rdma_cm_id *id, enum rdma_cm_event_type type)
{
	struct rdma_cm_event *ev = NULL;
	int r = rdma_get_cm_event(ch, &ev);

	if (!check(r == 0 && ev, name, "rdma_get_cm_event: %d errno %d", r, errno))
		return NULL;
	check(ev->event == type && ev->id == id && ev->listen_id == NULL, name,
	      "got %s (status %d) for id %p, want %s for %p", rdma_event_str(ev->event), ev->status,
	      (void *)ev->id, rdma_event_str(type), (void *)id);
	return ev;
}

static struct ibv_context **devs;
static int ndevs;

/* ---- the walk ------------------------------------------------------------ */

static void walk_library(const char *libpath)
{
	char real[PATH_MAX], line[PATH_MAX + 128];
	void *v, *c;
	FILE *f;
	int mapped = 0, other = 0;

	section("one library under two names");
	v = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	c = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_NOLOAD);
	check(v && c && v == c, "librdmacm.so.1 and libibverbs.so.1 are one loaded object",
	      "%p %p", v, c);
	check(dlsym(c, "rdma_get_devices") && dlsym(v, "ibv_open_device"),
	      "both libraries' symbols in it", "missing");
	if (!realpath(libpath, real))
		snprintf(real, sizeof real, "%s", libpath);
	f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f)) {
		char *p = strchr(line, '/');

		if (!p)
			continue;
		p[strcspn(p, "\n")] = 0;
		if (strcmp(p, real) == 0)
			mapped++;
		else if (strstr(p, "librdmacm") || strstr(p, "libibverbs"))
			other++, info("also mapped: %s", p);
	}
	if (f)
		fclose(f);
	check(mapped > 0 && other == 0, "only the drop-in is mapped (no Debian librdmacm/libibverbs)",
	      "%d mappings of %s, %d of others", mapped, real, other);
}

static void walk_devices(void)
{
	struct ibv_context **again;
	union ibv_gid g;
	int n2 = -1;

	section("rdma_get_devices");
	devs = rdma_get_devices(&ndevs);
	if (!check(devs && ndevs == 2, "rdma_get_devices lists the two soft devices", "%p n=%d",
		   (void *)devs, ndevs))
		exit(1);
	check(devs[2] == NULL, "the list ends with NULL", "%p", (void *)devs[2]);
	check(strcmp(ibv_get_device_name(devs[0]->device), "rxe0") == 0 &&
		      strcmp(ibv_get_device_name(devs[1]->device), "rxe1") == 0,
	      "rxe0 then rxe1", "%s %s", ibv_get_device_name(devs[0]->device),
	      ibv_get_device_name(devs[1]->device));
	check(ibv_query_gid(devs[0], 1, 0, &g) == 0 && gid_is(&g, "127.0.6.1"),
	      "rxe0's context answers verbs (GID 0 is ::ffff:127.0.6.1)", "query_gid");
	again = rdma_get_devices(&n2);
	check(again && n2 == 2 && again[0] == devs[0] && again[1] == devs[1],
	      "a second rdma_get_devices gives the same contexts", "%d", n2);
	rdma_free_devices(again);
	again = rdma_get_devices(NULL);
	check(again != NULL, "rdma_get_devices(NULL) works", "NULL");
	rdma_free_devices(again);
}

static struct rdma_event_channel *walk_channel(void)
{
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_event *ev = NULL;
	struct epoll_event ee = { .events = EPOLLIN }, got;
	int ep;

	section("event channels");
	ch = rdma_create_event_channel();
	if (!check(ch && ch->fd >= 0, "rdma_create_event_channel gives a descriptor", "%p",
		   (void *)ch))
		exit(1);
	check(!readable(ch->fd, 0), "a new channel's fd is not readable", "readable");
	set_nonblock(ch->fd, 1);
	FAILS("rdma_get_cm_event on an empty O_NONBLOCK channel: EAGAIN", rdma_get_cm_event(ch, &ev),
	      EAGAIN);
	set_nonblock(ch->fd, 0);
	FAILS("rdma_get_cm_event(NULL channel): EINVAL", rdma_get_cm_event(NULL, &ev), EINVAL);
	FAILS("rdma_get_cm_event(NULL event): EINVAL", rdma_get_cm_event(ch, NULL), EINVAL);
	FAILS("rdma_ack_cm_event(NULL): EINVAL", rdma_ack_cm_event(NULL), EINVAL);
	ch2 = rdma_create_event_channel();
	check(ch2 && ch2->fd != ch->fd, "a second channel has a descriptor of its own", "%p",
	      (void *)ch2);
	ep = epoll_create1(0);
	check(epoll_ctl(ep, EPOLL_CTL_ADD, ch2->fd, &ee) == 0 && epoll_wait(ep, &got, 1, 0) == 0,
	      "epoll takes the channel's fd (nothing pending)", "errno %d", errno);
	close(ep);
	rdma_destroy_event_channel(ch2);
	check(fcntl(ch->fd, F_GETFD) >= 0, "destroying one channel leaves the other's fd open",
	      "errno %d", errno);
	return ch;
}

static void walk_strings(void)
{
	static const char *names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	 "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED",	 "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	 "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED",	 "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED",	 "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	 "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE",	 "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	int i, bad = 0;

	section("rdma_event_str");
	for (i = 0; i < 16; i++)
		if (strcmp(rdma_event_str(i), names[i]))
			bad++, info("event %d: %s", i, rdma_event_str(i));
	check(bad == 0, "rdma_event_str names all 16 events", "%d differ", bad);
	check(strcmp(rdma_event_str(99), "UNKNOWN EVENT") == 0, "rdma_event_str(99)", "%s",
	      rdma_event_str(99));
}

static void walk_ids(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL, *id2 = NULL, *id3 = NULL, *uid = NULL;
	struct sockaddr_in a = sin4("127.0.6.1", 19600), b;
	struct sockaddr_un {
		sa_family_t f;
		char p[108];
	} un = { .f = AF_UNIX };
	int one = 1;
	char buf[64];

	section("rdma_create_id, rdma_bind_addr");
	FAILS("rdma_create_id(id NULL): EINVAL", rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	FAILS("rdma_create_id(ps 0x999): EINVAL", rdma_create_id(ch, &id, NULL, 0x999), EINVAL);
	OK0("rdma_create_id(RDMA_PS_TCP)", rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP));
	check(id->channel == ch && id->context == (void *)0x1234 && id->ps == RDMA_PS_TCP &&
		      id->qp_type == IBV_QPT_RC && !id->verbs && !id->qp && !id->pd && !id->event,
	      "a new id: channel, context, ps, qp_type RC, no device", "verbs %p qp_type %d",
	      (void *)id->verbs, id->qp_type);
	OK0("rdma_create_id(RDMA_PS_UDP)", rdma_create_id(ch, &uid, NULL, RDMA_PS_UDP));
	check(uid->qp_type == IBV_QPT_UD, "an RDMA_PS_UDP id is UD", "%d", uid->qp_type);

	FAILS("rdma_bind_addr(NULL addr): EINVAL", rdma_bind_addr(id, NULL), EINVAL);
	FAILS("rdma_bind_addr(AF_UNIX): EINVAL", rdma_bind_addr(id, (struct sockaddr *)&un), EINVAL);
	FAILS("rdma_bind_addr(NULL id): EINVAL", rdma_bind_addr(NULL, SA(a)), EINVAL);
	OK0("rdma_bind_addr(127.0.6.1:19600)", rdma_bind_addr(id, SA(a)));
	check(id->verbs == devs[0] && id->port_num == 1 && id->pd != NULL &&
		      id->pd->context == devs[0],
	      "bound to rxe0's address: verbs is rxe0's context, port 1, a PD",
	      "verbs %p (rxe0 %p) port %d pd %p", (void *)id->verbs, (void *)devs[0], id->port_num,
	      (void *)id->pd);
	check(rdma_get_src_port(id) == htons(19600) && rdma_get_dst_port(id) == 0,
	      "rdma_get_src_port 19600, rdma_get_dst_port 0", "%d %d", ntohs(rdma_get_src_port(id)),
	      ntohs(rdma_get_dst_port(id)));
	check(rdma_get_local_addr(id)->sa_family == AF_INET &&
		      strcmp(ip_of(rdma_get_local_addr(id), buf), "127.0.6.1") == 0,
	      "rdma_get_local_addr is 127.0.6.1", "%s", ip_of(rdma_get_local_addr(id), buf));
	check(gid_is(&id->route.addr.addr.ibaddr.sgid, "127.0.6.1") &&
		      id->route.addr.addr.ibaddr.pkey == 0xffff,
	      "the route's sgid is the RoCE v2 GID of 127.0.6.1, P_Key 0xffff", "pkey %#x",
	      id->route.addr.addr.ibaddr.pkey);
	FAILS("a second rdma_bind_addr of the id: EINVAL", rdma_bind_addr(id, SA(a)), EINVAL);

	OK0("rdma_create_id for a second id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	FAILS("the same address and port again: EADDRINUSE", rdma_bind_addr(id2, SA(a)), EADDRINUSE);
	b = sin4("0.0.0.0", 19600);
	FAILS("the wildcard address on a taken port: EADDRNOTAVAIL, as the kernel answers",
	      rdma_bind_addr(id2, SA(b)), EADDRNOTAVAIL);
	b = sin4("127.0.6.2", 19600);
	OK0("the same port on rxe1's address", rdma_bind_addr(id2, SA(b)));
	check(id2->verbs == devs[1], "bound to rxe1's address: rxe1's context", "%p",
	      (void *)id2->verbs);
	b = sin4("127.0.6.1", 19600);
	OK0("the same port in the UDP port space", rdma_bind_addr(uid, SA(b)));
	check(uid->verbs == devs[0], "the UDP id is on rxe0", "%p", (void *)uid->verbs);
	rdma_destroy_id(id2);

	/* REUSEADDR on both ids lets them share. */
	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	OK0("rdma_create_id", rdma_create_id(ch, &id3, NULL, RDMA_PS_TCP));
	OK0("RDMA_OPTION_ID_REUSEADDR on one id",
	    rdma_set_option(id2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one));
	OK0("RDMA_OPTION_ID_REUSEADDR on the other",
	    rdma_set_option(id3, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one));
	b = sin4("127.0.6.2", 19601);
	OK0("bind the first to 127.0.6.2:19601", rdma_bind_addr(id2, SA(b)));
	OK0("bind the second to the same (both REUSEADDR)", rdma_bind_addr(id3, SA(b)));
	rdma_destroy_id(id3);
	rdma_destroy_id(id2);

	/* Port 0 picks one; the port comes free when the id goes. */
	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	b = sin4("127.0.6.1", 0);
	OK0("bind to port 0", rdma_bind_addr(id2, SA(b)));
	check(ntohs(rdma_get_src_port(id2)) >= 32768, "port 0 gets an ephemeral port",
	      "%d", ntohs(rdma_get_src_port(id2)));
	rdma_destroy_id(id2);
	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	b = sin4("0.0.0.0", 19602);
	OK0("bind to the wildcard address", rdma_bind_addr(id2, SA(b)));
	check(id2->verbs == NULL && id2->port_num == 0 && id2->pd == NULL,
	      "a wildcard bind gives no device", "verbs %p", (void *)id2->verbs);
	rdma_destroy_id(id2);
	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	b = sin4("0.0.0.0", 19602);
	OK0("the wildcard's port is free again once its id is destroyed", rdma_bind_addr(id2, SA(b)));
	rdma_destroy_id(id2);

	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	b = sin4("127.0.6.50", 19603);
	OK0("a loopback address no soft device has binds with no device, as on the kernel",
	    rdma_bind_addr(id2, SA(b)));
	check(id2->verbs == NULL, "a loopback bind gives no device", "verbs %p", (void *)id2->verbs);
	OK0("and listens, as on the kernel (for that address only)", rdma_listen(id2, 1));
	rdma_destroy_id(id2);
	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	b = sin4("192.0.2.1", 19603);
	FAILS("an address this host does not have: EADDRNOTAVAIL", rdma_bind_addr(id2, SA(b)),
	      EADDRNOTAVAIL);
	rdma_destroy_id(id2);

	check(!readable(ch->fd, 0), "binding queues no event", "readable");
	OK0("rdma_destroy_id (bound, TCP)", rdma_destroy_id(id));
	OK0("rdma_destroy_id (bound, UDP)", rdma_destroy_id(uid));
	FAILS("rdma_destroy_id(NULL): EINVAL", rdma_destroy_id(NULL), EINVAL);
	check(rdma_get_src_port(NULL) == 0, "rdma_get_src_port(NULL) is 0", "nonzero");
}

struct later {
	struct rdma_cm_id *id;
	struct sockaddr_in dst;
};

static void *resolve_later(void *p)
{
	struct later *l = p;

	usleep(100 * 1000);
	rdma_resolve_addr(l->id, NULL, SA(l->dst), 2000);
	return NULL;
}

static void walk_resolve(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL, *id2 = NULL, *sid = NULL;
	struct rdma_cm_event *ev, *ev2;
	struct sockaddr_in dst = sin4("127.0.6.2", 19610), d2;
	struct ibv_sa_path_rec *p;
	uint8_t tos = 32;
	char buf[64];
	pthread_t t;
	struct later l;

	section("rdma_resolve_addr, rdma_resolve_route (asynchronous)");
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	FAILS("rdma_resolve_route before rdma_resolve_addr: EINVAL", rdma_resolve_route(id, 2000),
	      EINVAL);
	FAILS("rdma_resolve_addr(NULL dst): EINVAL", rdma_resolve_addr(id, NULL, NULL, 2000), EINVAL);
	OK0("RDMA_OPTION_ID_TOS 32", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1));
	OK0("rdma_resolve_addr(127.0.6.2:19610)", rdma_resolve_addr(id, NULL, SA(dst), 2000));
	check(readable(ch->fd, 1000), "the channel's fd is readable with the event", "not readable");
	ev = expect_event("RDMA_CM_EVENT_ADDR_RESOLVED", ch, id, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (ev) {
		check(ev->status == 0, "ADDR_RESOLVED status 0", "%d", ev->status);
		OK0("rdma_ack_cm_event", rdma_ack_cm_event(ev));
	}
	FAILS("rdma_ack_cm_event a second time: EINVAL", rdma_ack_cm_event(ev), EINVAL);
	check(id->verbs == devs[1] && id->port_num == 1 && id->pd,
	      "a destination that is rxe1's address resolves to rxe1", "verbs %p",
	      (void *)id->verbs);
	check(strcmp(ip_of(rdma_get_local_addr(id), buf), "127.0.6.2") == 0 &&
		      ntohs(rdma_get_src_port(id)) >= 32768,
	      "the source is rxe1's address with an ephemeral port", "%s:%d", buf,
	      ntohs(rdma_get_src_port(id)));
	check(strcmp(ip_of(rdma_get_peer_addr(id), buf), "127.0.6.2") == 0 &&
		      rdma_get_dst_port(id) == htons(19610),
	      "rdma_get_peer_addr / rdma_get_dst_port: 127.0.6.2:19610", "%s:%d", buf,
	      ntohs(rdma_get_dst_port(id)));
	check(gid_is(&id->route.addr.addr.ibaddr.dgid, "127.0.6.2"),
	      "the route's dgid is the destination's GID", "dgid");
	check(!readable(ch->fd, 0), "no event left", "readable");
	FAILS("rdma_resolve_addr a second time: EINVAL", rdma_resolve_addr(id, NULL, SA(dst), 2000),
	      EINVAL);

	OK0("rdma_resolve_route", rdma_resolve_route(id, 2000));
	ev = expect_event("RDMA_CM_EVENT_ROUTE_RESOLVED", ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED);
	if (ev)
		rdma_ack_cm_event(ev);
	p = id->route.path_rec;
	if (check(id->route.num_paths == 1 && p, "the route has one path record", "%d paths",
		  id->route.num_paths)) {
		check(gid_is(&p->sgid, "127.0.6.2") && gid_is(&p->dgid, "127.0.6.2"),
		      "path record: RoCE v2 GIDs of both ends", "gids");
		check(p->pkey == 0xffff && p->mtu == IBV_MTU_4096 && p->reversible == 1 &&
			      p->numb_path == 1 && p->hop_limit == 64 && p->packet_life_time == 16,
		      "path record: P_Key, MTU 4096, reversible, hop limit 64, life time 16",
		      "pkey %#x mtu %d rev %d hop %d plt %d", p->pkey, p->mtu, p->reversible,
		      p->hop_limit, p->packet_life_time);
		check(p->traffic_class == 32, "path record: traffic class is the TOS option",
		      "%d", p->traffic_class);
		check(ntohl(p->flow_label) ==
			      ((ntohs(rdma_get_src_port(id)) * 31u + 19610u) & 0xfffff),
		      "path record: the flow label the kernel derives from the ports", "%#x",
		      ntohl(p->flow_label));
	}
	FAILS("rdma_resolve_route a second time: EINVAL", rdma_resolve_route(id, 2000), EINVAL);
	OK0("rdma_destroy_id", rdma_destroy_id(id));

	/* A loopback destination no device has: the first loopback device. */
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	d2 = sin4("127.0.6.40", 19611);
	OK0("rdma_resolve_addr(127.0.6.40)", rdma_resolve_addr(id, NULL, SA(d2), 2000));
	ev = expect_event("ADDR_RESOLVED for another loopback address", ch, id,
			  RDMA_CM_EVENT_ADDR_RESOLVED);
	if (ev)
		rdma_ack_cm_event(ev);
	check(id->verbs == devs[0], "every 127.x address is reached from rxe0, the first device",
	      "%p", (void *)id->verbs);
	rdma_destroy_id(id);

	/* With a source address: bound there. */
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	d2 = sin4("127.0.6.1", 19612);
	OK0("rdma_resolve_addr(src 127.0.6.1:19612, dst 127.0.6.2)",
	    rdma_resolve_addr(id, SA(d2), SA(dst), 2000));
	ev = expect_event("ADDR_RESOLVED from a given source", ch, id, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (ev)
		rdma_ack_cm_event(ev);
	check(id->verbs == devs[0] && rdma_get_src_port(id) == htons(19612),
	      "the given source decides the device and port", "%p %d", (void *)id->verbs,
	      ntohs(rdma_get_src_port(id)));
	rdma_destroy_id(id);

	/* An unreachable destination: ADDR_ERROR. */
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	d2 = sin4("192.0.2.1", 19613);
	OK0("rdma_resolve_addr(192.0.2.1) returns 0", rdma_resolve_addr(id, NULL, SA(d2), 2000));
	ev = expect_event("no soft device reaches 192.0.2.1: RDMA_CM_EVENT_ADDR_ERROR", ch, id,
			  RDMA_CM_EVENT_ADDR_ERROR);
	if (ev) {
		check(ev->status < 0, "ADDR_ERROR has a negative errno status", "%d", ev->status);
		info("ADDR_ERROR status %d (%s)", ev->status, strerror(-ev->status));
		rdma_ack_cm_event(ev);
	}
	FAILS("rdma_resolve_route after ADDR_ERROR: EINVAL", rdma_resolve_route(id, 2000), EINVAL);
	rdma_destroy_id(id);

	/* Blocking rdma_get_cm_event wakes up for an event queued later. */
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	l.id = id;
	l.dst = sin4("127.0.6.2", 19614);
	pthread_create(&t, NULL, resolve_later, &l);
	ev = expect_event("a blocked rdma_get_cm_event returns the event queued by another thread",
			  ch, id, RDMA_CM_EVENT_ADDR_RESOLVED);
	pthread_join(t, NULL);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(id);

	/* Destroying an id drops its events not taken; one taken must be acked first. */
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	OK0("rdma_resolve_addr", rdma_resolve_addr(id, NULL, SA(dst), 2000));
	OK0("rdma_destroy_id with its event not taken", rdma_destroy_id(id));
	check(!readable(ch->fd, 0), "the destroyed id's event is gone from the channel",
	      "readable");

	/* Events go to the id's channel: rdma_migrate_id moves them. */
	section("rdma_migrate_id");
	{
		struct rdma_event_channel *ch2 = rdma_create_event_channel();

		OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
		OK0("rdma_resolve_addr", rdma_resolve_addr(id, NULL, SA(dst), 2000));
		OK0("rdma_migrate_id to a second channel", rdma_migrate_id(id, ch2));
		check(id->channel == ch2, "id->channel is the new channel", "%p", (void *)id->channel);
		check(!readable(ch->fd, 0) && readable(ch2->fd, 0),
		      "the pending event moved with the id", "old %d new %d", readable(ch->fd, 0),
		      readable(ch2->fd, 0));
		ev = expect_event("the event arrives on the new channel", ch2, id,
				  RDMA_CM_EVENT_ADDR_RESOLVED);
		if (ev)
			rdma_ack_cm_event(ev);
		OK0("rdma_migrate_id(NULL): synchronous", rdma_migrate_id(id, NULL));
		check(id->channel && id->channel != ch2 && id->channel != ch,
		      "a synchronous id has a channel of its own", "%p", (void *)id->channel);
		FAILS("rdma_migrate_id(NULL) of a synchronous id: EINVAL", rdma_migrate_id(id, NULL),
		      EINVAL);
		OK0("rdma_resolve_route, now synchronous", rdma_resolve_route(id, 2000));
		check(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
		      "the synchronous call left its event in id->event", "%p", (void *)id->event);
		OK0("rdma_migrate_id back to a channel", rdma_migrate_id(id, ch));
		check(id->event == NULL && id->channel == ch, "id->event acknowledged on the way",
		      "%p", (void *)id->event);
		FAILS("rdma_migrate_id(NULL id): EINVAL", rdma_migrate_id(NULL, ch), EINVAL);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ch2);
	}

	section("synchronous ids (no channel)");
	OK0("rdma_create_id(NULL channel)", rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP));
	check(sid->channel && sid->channel->fd >= 0, "a synchronous id gets a channel",
	      "%p", (void *)sid->channel);
	OK0("rdma_resolve_addr completes before it returns",
	    rdma_resolve_addr(sid, NULL, SA(dst), 2000));
	check(sid->event && sid->event->event == RDMA_CM_EVENT_ADDR_RESOLVED && sid->verbs == devs[1],
	      "id->event is ADDR_RESOLVED and the id has its device", "%p", (void *)sid->event);
	OK0("rdma_resolve_route completes before it returns", rdma_resolve_route(sid, 2000));
	check(sid->event && sid->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED &&
		      sid->route.num_paths == 1,
	      "id->event is ROUTE_RESOLVED", "%p", (void *)sid->event);
	OK0("rdma_destroy_id of a synchronous id (its event acknowledged)", rdma_destroy_id(sid));
	OK0("rdma_create_id(NULL channel)", rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP));
	d2 = sin4("192.0.2.1", 19615);
	errno = 0;
	{
		int r = rdma_resolve_addr(sid, NULL, SA(d2), 2000);
		int e = errno;

		check(r == -1 && (e == ENETUNREACH || e == ENODEV),
		      "a synchronous ADDR_ERROR is -1 with the status as errno", "%d errno %d", r, e);
	}
	check(sid->event && sid->event->event == RDMA_CM_EVENT_ADDR_ERROR,
	      "id->event is ADDR_ERROR", "%p", (void *)sid->event);
	rdma_destroy_id(sid);

	/* Two ids' events stay apart. */
	OK0("rdma_create_id", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	OK0("rdma_create_id", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	OK0("rdma_resolve_addr (first)", rdma_resolve_addr(id, NULL, SA(dst), 2000));
	OK0("rdma_resolve_addr (second)", rdma_resolve_addr(id2, NULL, SA(dst), 2000));
	ev = expect_event("the first id's event first", ch, id, RDMA_CM_EVENT_ADDR_RESOLVED);
	ev2 = expect_event("then the second's", ch, id2, RDMA_CM_EVENT_ADDR_RESOLVED);
	check(ev && ev2 && ev != ev2, "two events held at once", "%p %p", (void *)ev, (void *)ev2);
	if (ev)
		rdma_ack_cm_event(ev);
	if (ev2)
		rdma_ack_cm_event(ev2);
	rdma_destroy_id(id);
	rdma_destroy_id(id2);
}

static void walk_options(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id, *uid;
	uint8_t u8 = 18;
	int one = 1;
	struct ibv_path_data pd[2];

	section("rdma_set_option");
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	rdma_create_id(ch, &uid, NULL, RDMA_PS_UDP);
	OK0("RDMA_OPTION_ID_TOS", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &u8, 1));
	FAILS("RDMA_OPTION_ID_TOS with optlen 4: EINVAL",
	      rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, 4), EINVAL);
	OK0("RDMA_OPTION_ID_REUSEADDR",
	    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one));
	FAILS("RDMA_OPTION_ID_REUSEADDR with optlen 1: EINVAL",
	      rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &u8, 1), EINVAL);
	OK0("RDMA_OPTION_ID_AFONLY",
	    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one));
	OK0("RDMA_OPTION_ID_ACK_TIMEOUT on an RC id",
	    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &u8, 1));
	FAILS("RDMA_OPTION_ID_ACK_TIMEOUT on a UD id: EINVAL",
	      rdma_set_option(uid, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &u8, 1), EINVAL);
	FAILS("an unknown RDMA_OPTION_ID option: ENOSYS",
	      rdma_set_option(id, RDMA_OPTION_ID, 77, &one, sizeof one), ENOSYS);
	FAILS("an unknown option level: ENOSYS", rdma_set_option(id, 9, 0, &one, sizeof one), ENOSYS);
	FAILS("RDMA_OPTION_IB_PATH of a wrong size: EINVAL",
	      rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, 3), EINVAL);
	memset(pd, 0, sizeof pd);
	FAILS("RDMA_OPTION_IB_PATH before the address is resolved: EINVAL",
	      rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, sizeof pd[0]), EINVAL);
	FAILS("rdma_set_option(NULL id): EINVAL",
	      rdma_set_option(NULL, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &u8, 1), EINVAL);
	rdma_destroy_id(id);
	rdma_destroy_id(uid);
}

static void walk_qps(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id, *uid, *nid;
	struct sockaddr_in dst = sin4("127.0.6.1", 19620), src = sin4("127.0.6.1", 19621);
	struct rdma_cm_event *ev;
	struct ibv_qp_init_attr qa, ia;
	struct ibv_qp_attr a;
	struct ibv_srq_init_attr sa;
	struct ibv_srq_init_attr_ex sx;
	struct ibv_pd *other_pd;
	struct ibv_cq *cq;
	int mask = 0;

	section("rdma_create_qp: RC");
	memset(&qa, 0, sizeof qa);
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	rdma_create_id(ch, &nid, NULL, RDMA_PS_TCP);
	FAILS("rdma_create_qp on an id without device: EINVAL", rdma_create_qp(nid, NULL, &qa), EINVAL);
	FAILS("rdma_create_qp(NULL attr): EINVAL", rdma_create_qp(nid, NULL, NULL), EINVAL);
	rdma_destroy_id(nid);

	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	rdma_resolve_addr(id, NULL, SA(dst), 2000);
	if ((ev = expect_event("ADDR_RESOLVED", ch, id, RDMA_CM_EVENT_ADDR_RESOLVED)))
		rdma_ack_cm_event(ev);
	rdma_resolve_route(id, 2000);
	if ((ev = expect_event("ROUTE_RESOLVED", ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		rdma_ack_cm_event(ev);
	OK0("rdma_create_qp(RC, PD NULL)", rdma_create_qp(id, NULL, &qa));
	if (!check(id->qp != NULL, "id->qp is set", "NULL"))
		return;
	check(id->qp->pd == id->pd && id->qp->context == id->verbs, "the QP is on the id's PD",
	      "%p %p", (void *)id->qp->pd, (void *)id->pd);
	check(id->send_cq && id->recv_cq && id->send_cq != id->recv_cq && id->send_cq_channel &&
		      id->recv_cq_channel && id->send_cq->cq_context == id &&
		      id->qp->send_cq == id->send_cq && id->qp->recv_cq == id->recv_cq &&
		      qa.send_cq == id->send_cq && qa.recv_cq == id->recv_cq,
	      "librdmacm's CQs and channels, cq_context the id, written back to the attributes",
	      "send %p recv %p", (void *)id->send_cq, (void *)id->recv_cq);
	memset(&a, 0, sizeof a);
	check(ibv_query_qp(id->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
			   &ia) == 0 &&
		      a.qp_state == IBV_QPS_INIT && a.port_num == 1 && a.pkey_index == 0 &&
		      a.qp_access_flags == 0,
	      "an RC QP is left in INIT (port 1, P_Key index 0, no remote access), as librdmacm leaves it",
	      "state %d port %d pkey %d access %#x", a.qp_state, a.port_num, a.pkey_index,
	      a.qp_access_flags);
	FAILS("a second rdma_create_qp: EINVAL", rdma_create_qp(id, NULL, &qa), EINVAL);
	a.qp_state = IBV_QPS_INIT;
	OK0("rdma_init_qp_attr(INIT)", rdma_init_qp_attr(id, &a, &mask));
	check(a.qp_state == IBV_QPS_INIT &&
		      mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) &&
		      a.port_num == 1,
	      "rdma_init_qp_attr(INIT) of an RC id: state, P_Key index, port, access", "mask %#x",
	      mask);
	FAILS("rdma_init_qp_attr(NULL attr): EINVAL", rdma_init_qp_attr(id, NULL, &mask), EINVAL);
	rdma_destroy_qp(id);
	check(id->qp == NULL && id->send_cq == NULL && id->recv_cq == NULL &&
		      id->send_cq_channel == NULL && id->recv_cq_channel == NULL,
	      "rdma_destroy_qp clears the QP and librdmacm's CQs", "qp %p", (void *)id->qp);

	/* Own CQ, PD of another device, SRQ. */
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	qa.send_cq = qa.recv_cq = cq;
	OK0("rdma_create_qp with the program's CQ", rdma_create_qp(id, NULL, &qa));
	check(id->qp && id->qp->send_cq == cq && id->send_cq == NULL && id->recv_cq == NULL,
	      "the program's CQ is used and no CQ is made", "%p", (void *)id->send_cq);
	rdma_destroy_qp(id);
	qa.send_cq = qa.recv_cq = NULL;
	other_pd = ibv_alloc_pd(devs[1]);
	FAILS("rdma_create_qp on another device's PD: EINVAL", rdma_create_qp(id, other_pd, &qa),
	      EINVAL);

	section("rdma_create_srq");
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 16;
	sa.attr.max_sge = 1;
	OK0("rdma_create_srq(PD NULL)", rdma_create_srq(id, NULL, &sa));
	check(id->srq != NULL && id->srq->pd == id->pd, "id->srq on the id's PD", "%p",
	      (void *)id->srq);
	OK0("rdma_create_qp picks up the id's SRQ", rdma_create_qp(id, NULL, &qa));
	check(id->qp && id->qp->srq == id->srq && qa.srq == id->srq, "the QP uses the id's SRQ",
	      "%p", id->qp ? (void *)id->qp->srq : NULL);
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	check(id->srq == NULL, "rdma_destroy_srq clears id->srq", "%p", (void *)id->srq);
	memset(&sx, 0, sizeof sx);
	sx.attr.max_wr = 4;
	sx.attr.max_sge = 1;
	FAILS("rdma_create_srq_ex without IBV_SRQ_INIT_ATTR_TYPE: EINVAL",
	      rdma_create_srq_ex(id, &sx), EINVAL);
	sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	sx.srq_type = IBV_SRQT_XRC;
	FAILS("rdma_create_srq_ex(XRC): EOPNOTSUPP", rdma_create_srq_ex(id, &sx), EOPNOTSUPP);
	sx.srq_type = IBV_SRQT_BASIC;
	OK0("rdma_create_srq_ex(basic)", rdma_create_srq_ex(id, &sx));
	rdma_destroy_srq(id);

	section("rdma_create_qp_ex");
	{
		struct ibv_qp_init_attr_ex x;

		memset(&x, 0, sizeof x);
		x.cap = qa.cap;
		x.qp_type = IBV_QPT_RC;
		OK0("rdma_create_qp_ex (no PD in comp_mask: the id's)", rdma_create_qp_ex(id, &x));
		check(id->qp && x.pd == id->pd && (x.comp_mask & IBV_QP_INIT_ATTR_PD) &&
			      qp_state(id->qp) == IBV_QPS_INIT,
		      "rdma_create_qp_ex fills in the PD, QP in INIT", "%p", (void *)x.pd);
		rdma_destroy_qp(id);
		FAILS("rdma_create_qp_ex(NULL attr): EINVAL", rdma_create_qp_ex(id, NULL), EINVAL);
	}
	rdma_destroy_id(id);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(other_pd);

	section("rdma_create_qp: UD");
	qa.send_cq = qa.recv_cq = NULL;
	qa.srq = NULL;
	rdma_create_id(ch, &uid, NULL, RDMA_PS_UDP);
	OK0("rdma_bind_addr", rdma_bind_addr(uid, SA(src)));
	qa.qp_type = IBV_QPT_UD;
	OK0("rdma_create_qp(UD)", rdma_create_qp(uid, NULL, &qa));
	memset(&a, 0, sizeof a);
	check(uid->qp &&
		      ibv_query_qp(uid->qp, &a, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN, &ia) == 0 &&
		      a.qp_state == IBV_QPS_RTS && a.qkey == RDMA_UDP_QKEY && a.sq_psn == 0,
	      "a UD QP goes to RTS with Q_Key RDMA_UDP_QKEY and SQ PSN 0, as librdmacm moves it",
	      "state %d qkey %#x psn %u", a.qp_state, a.qkey, a.sq_psn);
	a.qp_state = IBV_QPS_INIT;
	OK0("rdma_init_qp_attr(INIT) of a UD id", rdma_init_qp_attr(uid, &a, &mask));
	check(mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) &&
		      a.qkey == RDMA_UDP_QKEY,
	      "a UD id's INIT attributes carry the Q_Key", "mask %#x qkey %#x", mask, a.qkey);
	rdma_destroy_qp(uid);
	rdma_destroy_id(uid);
}

static void walk_addrinfo(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in *s;
	int r;
	char buf[64];

	section("rdma_getaddrinfo");
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	OK0("rdma_getaddrinfo(127.0.6.1, 19630, NUMERICHOST, TCP)",
	    rdma_getaddrinfo("127.0.6.1", "19630", &hints, &res));
	if (res) {
		s = (struct sockaddr_in *)res->ai_dst_addr;
		check(res->ai_family == AF_INET && res->ai_dst_len == sizeof *s && s &&
			      s->sin_port == htons(19630) &&
			      strcmp(ip_of(res->ai_dst_addr, buf), "127.0.6.1") == 0 &&
			      res->ai_src_addr == NULL && !(res->ai_flags & RAI_PASSIVE),
		      "the destination address and port", "%s", buf);
		check(res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP &&
			      res->ai_next == NULL && res->ai_route_len == 0,
		      "RC in the TCP port space, one answer, no route", "qp %d ps %#x",
		      res->ai_qp_type, res->ai_port_space);
		rdma_freeaddrinfo(res);
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_family = AF_INET;
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_port_space = RDMA_PS_UDP;
	res = NULL;
	OK0("rdma_getaddrinfo(NULL, 19631, PASSIVE, UD)", rdma_getaddrinfo(NULL, "19631", &hints, &res));
	if (res) {
		s = (struct sockaddr_in *)res->ai_src_addr;
		check((res->ai_flags & RAI_PASSIVE) && s && s->sin_port == htons(19631) &&
			      s->sin_addr.s_addr == INADDR_ANY && res->ai_qp_type == IBV_QPT_UD &&
			      res->ai_port_space == RDMA_PS_UDP,
		      "passive: the wildcard source with the port, UD, UDP port space", "flags %#x",
		      res->ai_flags);
		rdma_freeaddrinfo(res);
	}
	res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_INET;
	OK0("rdma_getaddrinfo(\"localhost\", NULL) through getaddrinfo",
	    rdma_getaddrinfo("localhost", NULL, &hints, &res));
	if (res) {
		check(res->ai_dst_addr && strncmp(ip_of(res->ai_dst_addr, buf), "127.", 4) == 0,
		      "localhost is a 127.x destination", "%s", buf);
		rdma_freeaddrinfo(res);
	}
	errno = 0;
	FAILS("rdma_getaddrinfo(NULL, NULL, NULL): EINVAL", rdma_getaddrinfo(NULL, NULL, NULL, &res),
	      EINVAL);
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_NUMERICHOST;
	res = NULL;
	r = rdma_getaddrinfo("not-an-address", "19632", &hints, &res);
	check(r != 0 && r != -1 && res == NULL, "a name with RAI_NUMERICHOST: getaddrinfo's EAI_ code",
	      "%d", r);
	info("rdma_getaddrinfo(\"not-an-address\", NUMERICHOST) = %d (%s)", r, gai_strerror(r));
	rdma_freeaddrinfo(NULL);
	check(1, "rdma_freeaddrinfo(NULL) is harmless", "-");
}

static void walk_ep(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *ep = NULL, *req = NULL;
	struct ibv_qp_init_attr qa;

	section("rdma_create_ep");
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (!check(rdma_getaddrinfo("127.0.6.2", "19640", &hints, &res) == 0, "rdma_getaddrinfo",
		   "errno %d", errno))
		return;
	memset(&qa, 0, sizeof qa);
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.sq_sig_all = 1;
	OK0("rdma_create_ep (active, with QP attributes)", rdma_create_ep(&ep, res, NULL, &qa));
	if (ep) {
		check(ep->verbs == devs[1] && ep->route.num_paths == 1 && ep->qp &&
			      qp_state(ep->qp) == IBV_QPS_INIT && ep->channel,
		      "the endpoint: address and route resolved, an RC QP in INIT, its own channel",
		      "verbs %p qp %p", (void *)ep->verbs, (void *)ep->qp);
		check(ep->event && ep->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
		      "id->event holds the last synchronous event", "%p", (void *)ep->event);
		FAILS("rdma_connect (synchronous) to a port nobody listens on: ECONNREFUSED",
		      rdma_connect(ep, NULL), ECONNREFUSED);
		check(ep->event && ep->event->event == RDMA_CM_EVENT_REJECTED &&
			      ep->event->status == 8,
		      "id->event is the REJECTED event, status 8 (invalid service ID)", "%d %d",
		      ep->event ? (int)ep->event->event : -1, ep->event ? ep->event->status : 0);
		rdma_destroy_ep(ep);
		check(1, "rdma_destroy_ep", "-");
	}
	rdma_freeaddrinfo(res);

	hints.ai_flags = RAI_PASSIVE;
	res = NULL;
	rdma_getaddrinfo("127.0.6.1", "19641", &hints, &res);
	ep = NULL;
	OK0("rdma_create_ep (passive)", rdma_create_ep(&ep, res, NULL, &qa));
	if (ep) {
		check(ep->verbs == devs[0] && rdma_get_src_port(ep) == htons(19641) && !ep->qp,
		      "the passive endpoint is bound, without a QP yet", "verbs %p",
		      (void *)ep->verbs);
		OK0("rdma_listen", rdma_listen(ep, 4));
		set_nonblock(ep->channel->fd, 1);
		FAILS("rdma_get_request with no request (non-blocking): EAGAIN",
		      rdma_get_request(ep, &req), EAGAIN);
		rdma_destroy_ep(ep);
	}
	rdma_freeaddrinfo(res);
	FAILS("rdma_create_ep(NULL res): EINVAL", rdma_create_ep(&ep, NULL, NULL, NULL), EINVAL);
}

/* The next event on ch within 5 s, which must be `want` (NULL if not). */
static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
					const char *name)
{
	struct rdma_cm_event *e = NULL;

	if (!readable(ch->fd, 5000)) {
		check(0, name, "no event within 5 s (want %s)", rdma_event_str(want));
		return NULL;
	}
	if (rdma_get_cm_event(ch, &e) != 0) {
		check(0, name, "rdma_get_cm_event: errno %d", errno);
		return NULL;
	}
	if (!check(e->event == want, name, "got %s status %d, want %s", rdma_event_str(e->event),
		   e->status, rdma_event_str(want))) {
		rdma_ack_cm_event(e);
		return NULL;
	}
	return e;
}

/*
 * A client id on cch, from 127.0.6.2 (rxe1), with its route to
 * 127.0.6.1:port resolved (events taken).
 */
static struct rdma_cm_id *client_to(struct rdma_event_channel *cch, int port)
{
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *e;
	struct sockaddr_in dst = sin4("127.0.6.1", port), src = sin4("127.0.6.2", 0);

	if (rdma_create_id(cch, &id, NULL, RDMA_PS_TCP))
		return NULL;
	if (rdma_resolve_addr(id, SA(src), SA(dst), 1000) == 0 &&
	    (e = wait_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED, "client: ADDR_RESOLVED"))) {
		rdma_ack_cm_event(e);
		if (rdma_resolve_route(id, 1000) == 0 &&
		    (e = wait_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, "client: ROUTE_RESOLVED"))) {
			rdma_ack_cm_event(e);
			return id;
		}
	}
	rdma_destroy_id(id);
	return NULL;
}

static struct ibv_qp_init_attr rc_attr(void)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = 64;
	return qa;
}

static void walk_connect(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *lid = NULL, *cid, *sid = NULL;
	struct rdma_cm_event *e;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr qpa;
	int mask = 0;
	uint32_t cqpn = 0, sqpn = 0;
	struct sockaddr_in la = sin4("127.0.6.1", 19645);
	char buf[64];

	section("a connection between rxe1 and rxe0 (REQ, REP, RTU, DREQ, DREP)");
	if (!check(sch && cch, "two event channels", "errno %d", errno))
		return;
	OK0("rdma_create_id (listener)", rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP));
	OK0("rdma_bind_addr 127.0.6.1:19645", rdma_bind_addr(lid, SA(la)));
	OK0("rdma_listen", rdma_listen(lid, 8));
	FAILS("rdma_listen again: EINVAL, as the kernel answers", rdma_listen(lid, 16), EINVAL);
	cid = client_to(cch, 19645);
	if (!check(cid != NULL, "the client's route is resolved", "-"))
		goto out;
	qa = rc_attr();
	OK0("rdma_create_qp (client)", rdma_create_qp(cid, NULL, &qa));
	cqpn = cid->qp ? cid->qp->qp_num : 0;
	memset(&cp, 0, sizeof cp);
	cp.private_data = "hello-req";
	cp.private_data_len = 10;
	cp.responder_resources = 1;
	cp.initiator_depth = 2;
	cp.retry_count = 5;
	cp.rnr_retry_count = 6;
	OK0("rdma_connect", rdma_connect(cid, &cp));
	e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "server: CONNECT_REQUEST");
	if (e) {
		struct rdma_conn_param *c = &e->param.conn;

		sid = e->id;
		check(e->listen_id == lid && sid && sid != lid && sid->channel == sch,
		      "a new id on the listener's channel, listen_id the listener", "%p %p",
		      (void *)e->listen_id, (void *)sid);
		check(e->status == 0 && c->private_data && c->private_data_len >= 10 &&
			      strcmp(c->private_data, "hello-req") == 0,
		      "the request's private data (after rdma_cm's header)", "len %d",
		      c->private_data_len);
		check(c->qp_num == cqpn && c->responder_resources == 1 && c->initiator_depth == 2 &&
			      c->retry_count == 5 && c->rnr_retry_count == 6 && c->srq == 0,
		      "the request's qp_num, depths and retry counts", "qpn %#x/%#x rr %d id %d rc %d rnr %d",
		      c->qp_num, cqpn, c->responder_resources, c->initiator_depth, c->retry_count,
		      c->rnr_retry_count);
		rdma_ack_cm_event(e);
	}
	if (!sid)
		goto out_c;
	check(sid->verbs == devs[0] && sid->pd && sid->route.num_paths == 1 &&
		      sid->route.path_rec && sid->port_num == 1,
	      "the new id: rxe0, a PD, one path record", "verbs %p paths %d", (void *)sid->verbs,
	      sid->route.num_paths);
	check(strcmp(ip_of(rdma_get_local_addr(sid), buf), "127.0.6.1") == 0 &&
		      rdma_get_src_port(sid) == htons(19645),
	      "its local address is the listener's 127.0.6.1:19645", "%s", buf);
	check(strcmp(ip_of(rdma_get_peer_addr(sid), buf), "127.0.6.2") == 0 &&
		      rdma_get_dst_port(sid) == rdma_get_src_port(cid),
	      "its peer is the client's address and port", "%s", buf);
	check(gid_is(&sid->route.addr.addr.ibaddr.sgid, "127.0.6.1") &&
		      gid_is(&sid->route.addr.addr.ibaddr.dgid, "127.0.6.2"),
	      "its GIDs", "-");
	memset(&qpa, 0, sizeof qpa);
	qpa.qp_state = IBV_QPS_RTR;
	OK0("rdma_init_qp_attr(RTR) of the request, before rdma_accept",
	    rdma_init_qp_attr(sid, &qpa, &mask));
	check(qpa.dest_qp_num == cqpn && (mask & IBV_QP_DEST_QPN) && (mask & IBV_QP_RQ_PSN) &&
		      (mask & IBV_QP_AV) && qpa.max_dest_rd_atomic == 2 &&
		      qpa.ah_attr.is_global == 1 && gid_is(&qpa.ah_attr.grh.dgid, "127.0.6.2"),
	      "RTR: the client's QP, depths and GID", "dest %#x mask %#x mdra %d", qpa.dest_qp_num,
	      mask, qpa.max_dest_rd_atomic);
	qa = rc_attr();
	OK0("rdma_create_qp (server)", rdma_create_qp(sid, NULL, &qa));
	sqpn = sid->qp ? sid->qp->qp_num : 0;
	memset(&cp, 0, sizeof cp);
	cp.private_data = "hello-rep";
	cp.private_data_len = 10;
	cp.responder_resources = 2;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	OK0("rdma_accept", rdma_accept(sid, &cp));
	e = wait_event(cch, RDMA_CM_EVENT_ESTABLISHED, "client: ESTABLISHED");
	if (e) {
		struct rdma_conn_param *c = &e->param.conn;

		check(e->id == cid && e->status == 0 && c->private_data &&
			      strcmp(c->private_data, "hello-rep") == 0 && c->qp_num == sqpn &&
			      c->responder_resources == 2 && c->initiator_depth == 1,
		      "ESTABLISHED carries the REP's parameters", "qpn %#x/%#x", c->qp_num, sqpn);
		rdma_ack_cm_event(e);
	}
	e = wait_event(sch, RDMA_CM_EVENT_ESTABLISHED, "server: ESTABLISHED (the RTU)");
	if (e) {
		check(e->id == sid, "for the new id", "%p", (void *)e->id);
		rdma_ack_cm_event(e);
	}
	check(qp_state(cid->qp) == IBV_QPS_RTS && qp_state(sid->qp) == IBV_QPS_RTS,
	      "both QPs are in RTS", "%d %d", qp_state(cid->qp), qp_state(sid->qp));
	memset(&qpa, 0, sizeof qpa);
	qpa.qp_state = IBV_QPS_RTS;
	OK0("rdma_init_qp_attr(RTS) of the client", rdma_init_qp_attr(cid, &qpa, &mask));
	check((mask & IBV_QP_SQ_PSN) && (mask & IBV_QP_MAX_QP_RD_ATOMIC) && qpa.max_rd_atomic == 2 &&
		      qpa.retry_cnt == 5 && qpa.rnr_retry == 7,
	      "RTS: the REP's responder resources, the REQ's retries, the REP's RNR retries",
	      "mask %#x mra %d retry %d rnr %d", mask, qpa.max_rd_atomic, qpa.retry_cnt,
	      qpa.rnr_retry);
	{
		struct ibv_mr *mr;
		struct ibv_wc wc;
		char msg[16] = "over rdma_cm", got[16] = "";
		int n = 0, i;

		mr = ibv_reg_mr(sid->pd, got, sizeof got, IBV_ACCESS_LOCAL_WRITE);
		if (mr && rdma_post_recv(sid, NULL, got, sizeof got, mr) == 0 &&
		    rdma_post_send(cid, NULL, msg, sizeof msg, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED) == 0) {
			for (i = 0; i < 500 && n == 0; i++) {
				n = ibv_poll_cq(sid->recv_cq, 1, &wc);
				if (!n)
					usleep(10000);
			}
			check(n == 1 && wc.status == IBV_WC_SUCCESS && strcmp(got, msg) == 0,
			      "a SEND from the client arrives at the server", "n %d status %d", n,
			      n ? wc.status : -1);
		} else {
			check(0, "a SEND from the client arrives at the server", "post: errno %d", errno);
		}
		if (mr)
			ibv_dereg_mr(mr);
	}
	OK0("rdma_notify(COMM_EST) on an established id", rdma_notify(sid, IBV_EVENT_COMM_EST));
	FAILS("rdma_notify(another event): EINVAL", rdma_notify(sid, IBV_EVENT_QP_FATAL), EINVAL);
	FAILS("rdma_establish on an id with a QP: EINVAL", rdma_establish(cid), EINVAL);
	OK0("rdma_disconnect (client)", rdma_disconnect(cid));
	check(qp_state(cid->qp) == IBV_QPS_ERR, "the client's QP is in ERR", "%d",
	      qp_state(cid->qp));
	e = wait_event(sch, RDMA_CM_EVENT_DISCONNECTED, "server: DISCONNECTED (the DREQ)");
	if (e)
		rdma_ack_cm_event(e);
	OK0("rdma_disconnect (server: the DREP)", rdma_disconnect(sid));
	e = wait_event(cch, RDMA_CM_EVENT_DISCONNECTED, "client: DISCONNECTED (the DREP)");
	if (e)
		rdma_ack_cm_event(e);
	e = wait_event(sch, RDMA_CM_EVENT_TIMEWAIT_EXIT, "server: TIMEWAIT_EXIT");
	if (e)
		rdma_ack_cm_event(e);
	rdma_destroy_qp(sid);
	OK0("rdma_destroy_id (server's connection)", rdma_destroy_id(sid));
	rdma_destroy_qp(cid);
	OK0("rdma_destroy_id (client)", rdma_destroy_id(cid));

	section("rdma_reject, and a port nobody listens on");
	cid = client_to(cch, 19645);
	if (cid) {
		qa = rc_attr();
		rdma_create_qp(cid, NULL, &qa);
		memset(&cp, 0, sizeof cp);
		OK0("rdma_connect", rdma_connect(cid, &cp));
		e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "server: CONNECT_REQUEST");
		if (e) {
			sid = e->id;
			rdma_ack_cm_event(e);
			OK0("rdma_reject with private data", rdma_reject(sid, "nope", 5));
			e = wait_event(cch, RDMA_CM_EVENT_REJECTED, "client: REJECTED");
			if (e) {
				check(e->status == 28 && e->param.conn.private_data &&
					      strcmp(e->param.conn.private_data, "nope") == 0,
				      "status 28 (consumer defined) and the REJ's private data",
				      "status %d", e->status);
				rdma_ack_cm_event(e);
			}
			rdma_destroy_id(sid);
		}
		rdma_destroy_qp(cid);
		rdma_destroy_id(cid);
	}
	cid = client_to(cch, 19646);
	if (cid) {
		qa = rc_attr();
		rdma_create_qp(cid, NULL, &qa);
		memset(&cp, 0, sizeof cp);
		OK0("rdma_connect to 127.0.6.1:19646", rdma_connect(cid, &cp));
		e = wait_event(cch, RDMA_CM_EVENT_REJECTED, "REJECTED: nobody listens there");
		if (e) {
			check(e->status == 8, "status 8 (invalid service ID)", "%d", e->status);
			rdma_ack_cm_event(e);
		}
		rdma_destroy_qp(cid);
		rdma_destroy_id(cid);
	}

	section("a client that moves its own QP (conn_param->qp_num, CONNECT_RESPONSE, rdma_establish)");
	cid = client_to(cch, 19645);
	if (cid) {
		struct ibv_cq *cq = ibv_create_cq(cid->verbs, 4, NULL, NULL, 0);
		struct ibv_qp *qp;
		struct rdma_conn_param *c;

		qa = rc_attr();
		qa.send_cq = qa.recv_cq = cq;
		qp = cq ? ibv_create_qp(cid->pd, &qa) : NULL;
		if (!check(qp != NULL, "ibv_create_qp on the id's PD", "errno %d", errno))
			goto out_c;
		FAILS("rdma_connect without a QP or conn_param: EINVAL", rdma_connect(cid, NULL),
		      EINVAL);
		memset(&cp, 0, sizeof cp);
		cp.qp_num = qp->qp_num;
		cp.responder_resources = cp.initiator_depth = 1;
		cp.retry_count = cp.rnr_retry_count = 7;
		OK0("rdma_connect with conn_param->qp_num", rdma_connect(cid, &cp));
		e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "server: CONNECT_REQUEST");
		sid = NULL;
		if (e) {
			sid = e->id;
			check(e->param.conn.qp_num == qp->qp_num, "the request names that QP", "%#x",
			      e->param.conn.qp_num);
			rdma_ack_cm_event(e);
			qa = rc_attr();
			rdma_create_qp(sid, NULL, &qa);
			OK0("rdma_accept(NULL)", rdma_accept(sid, NULL));
		}
		e = wait_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, "client: CONNECT_RESPONSE");
		if (e) {
			c = &e->param.conn;
			check(sid && sid->qp && c->qp_num == sid->qp->qp_num,
			      "CONNECT_RESPONSE carries the REP's QP", "%#x", c->qp_num);
			rdma_ack_cm_event(e);
		}
		{
			static const enum ibv_qp_state to[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
			int i, ok = 1;

			for (i = 0; i < 3; i++) {
				memset(&qpa, 0, sizeof qpa);
				qpa.qp_state = to[i];
				if (rdma_init_qp_attr(cid, &qpa, &mask) || ibv_modify_qp(qp, &qpa, mask)) {
					ok = 0;
					info("state %d: errno %d", to[i], errno);
				}
			}
			check(ok && qp_state(qp) == IBV_QPS_RTS,
			      "rdma_init_qp_attr + ibv_modify_qp to INIT, RTR, RTS", "state %d",
			      qp_state(qp));
			check(sid && sid->qp && qpa.sq_psn != 0 && qpa.max_rd_atomic == 1,
			      "RTS attributes", "sq_psn %#x", qpa.sq_psn);
		}
		OK0("rdma_establish (the RTU)", rdma_establish(cid));
		e = wait_event(sch, RDMA_CM_EVENT_ESTABLISHED, "server: ESTABLISHED");
		if (e)
			rdma_ack_cm_event(e);
		check(!readable(cch->fd, 300), "no ESTABLISHED on the client after rdma_establish",
		      "readable");
		OK0("rdma_disconnect (client)", rdma_disconnect(cid));
		if (sid) {
			e = wait_event(sch, RDMA_CM_EVENT_DISCONNECTED, "server: DISCONNECTED");
			if (e)
				rdma_ack_cm_event(e);
			rdma_disconnect(sid);
		}
		e = wait_event(cch, RDMA_CM_EVENT_DISCONNECTED, "client: DISCONNECTED");
		if (e)
			rdma_ack_cm_event(e);
		if (sid) {
			rdma_destroy_qp(sid);
			rdma_destroy_id(sid);
		}
		OK0("rdma_destroy_id (client)", rdma_destroy_id(cid));
		ibv_destroy_qp(qp);
		ibv_destroy_cq(cq);
	}
out_c:
	;
out:
	OK0("rdma_destroy_id (listener)", rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/*
 * A UD client id on cch, from 127.0.6.2 (rxe1), with its route to
 * 127.0.6.1:port resolved (events taken).
 */
static struct rdma_cm_id *ud_client_to(struct rdma_event_channel *cch, int port)
{
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *e;
	struct sockaddr_in dst = sin4("127.0.6.1", port), src = sin4("127.0.6.2", 0);

	if (rdma_create_id(cch, &id, NULL, RDMA_PS_UDP))
		return NULL;
	if (rdma_resolve_addr(id, SA(src), SA(dst), 1000) == 0 &&
	    (e = wait_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED, "UD client: ADDR_RESOLVED"))) {
		rdma_ack_cm_event(e);
		if (rdma_resolve_route(id, 1000) == 0 &&
		    (e = wait_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, "UD client: ROUTE_RESOLVED"))) {
			rdma_ack_cm_event(e);
			return id;
		}
	}
	rdma_destroy_id(id);
	return NULL;
}

/*
 * UD through SIDR, as udaddy does it: the client's rdma_connect sends a
 * SIDR_REQ, the listener's CONNECT_REQUEST carries its private data,
 * rdma_accept answers with the UD QP, and the client's ESTABLISHED has
 * param.ud (ah_attr, qp_num, qkey) to send with. Then a port nobody
 * listens on (UNREACHABLE, status 1) and a rejection (UNREACHABLE,
 * status 2, as the kernel's rdma_cm reports a SIDR_REP that refuses).
 */
static void walk_ud(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *lid = NULL, *cid = NULL, *sid = NULL;
	struct rdma_cm_event *e;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;
	struct sockaddr_in la = sin4("127.0.6.1", 19642);
	struct ibv_ah *ah = NULL;
	struct ibv_mr *smr = NULL, *cmr = NULL;
	static char sbuf[40 + 64], cbuf[64];
	uint32_t rqpn = 0, rqkey = 0;
	char buf[64];

	section("UD through SIDR between rxe1 and rxe0 (SIDR_REQ, SIDR_REP)");
	if (!check(sch && cch, "two event channels", "errno %d", errno))
		return;
	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_UD;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	OK0("rdma_create_id (UDP listener)", rdma_create_id(sch, &lid, NULL, RDMA_PS_UDP));
	OK0("rdma_bind_addr 127.0.6.1:19642", rdma_bind_addr(lid, SA(la)));
	OK0("rdma_listen (UDP)", rdma_listen(lid, 4));
	cid = ud_client_to(cch, 19642);
	if (!check(cid != NULL, "the UD client's route is resolved", "-"))
		goto out;
	OK0("rdma_create_qp (UD client)", rdma_create_qp(cid, NULL, &qa));
	memset(&cp, 0, sizeof cp);
	cp.private_data = "hello-ud";
	cp.private_data_len = 9;
	OK0("rdma_connect (UD: a SIDR_REQ)", rdma_connect(cid, &cp));
	e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "server: UD CONNECT_REQUEST");
	if (e) {
		struct rdma_ud_param *u = &e->param.ud;

		sid = e->id;
		check(e->listen_id == lid && sid && sid != lid && sid->channel == sch &&
			      sid->qp_type == IBV_QPT_UD && sid->ps == RDMA_PS_UDP,
		      "a new UD id on the listener's channel", "%p", (void *)sid);
		check(e->status == 0 && u->private_data && u->private_data_len == 180 &&
			      strcmp(u->private_data, "hello-ud") == 0,
		      "param.ud has the SIDR_REQ's private data after rdma_cm's header (180 bytes)",
		      "len %d", u->private_data_len);
		check(u->qp_num == 0 && u->qkey == 0, "a request names no QP", "qpn %#x", u->qp_num);
		rdma_ack_cm_event(e);
	}
	if (!sid)
		goto out_c;
	check(sid->verbs == devs[0] && sid->pd && sid->port_num == 1 &&
		      strcmp(ip_of(rdma_get_local_addr(sid), buf), "127.0.6.1") == 0 &&
		      rdma_get_src_port(sid) == htons(19642),
	      "the new UD id: rxe0, a PD, the listener's 127.0.6.1:19642", "%s", buf);
	check(strcmp(ip_of(rdma_get_peer_addr(sid), buf), "127.0.6.2") == 0 &&
		      rdma_get_dst_port(sid) == rdma_get_src_port(cid),
	      "its peer is the UD client's address and port", "%s", buf);
	qa.send_cq = qa.recv_cq = NULL; /* the client's, written back by rdma_create_qp */
	OK0("rdma_create_qp (UD server)", rdma_create_qp(sid, NULL, &qa));
	smr = ibv_reg_mr(sid->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	cmr = ibv_reg_mr(cid->pd, cbuf, sizeof cbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!check(smr && cmr && sid->qp, "two MRs and the server's QP", "errno %d", errno))
		goto out_s;
	{
		struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = sizeof sbuf,
				       .lkey = smr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

		OK0("ibv_post_recv on the server's UD QP", ibv_post_recv(sid->qp, &wr, &bad));
	}
	memset(&cp, 0, sizeof cp);
	cp.qp_num = sid->qp->qp_num;
	cp.private_data = "hello-back";
	cp.private_data_len = 11;
	OK0("rdma_accept (UD: a SIDR_REP)", rdma_accept(sid, &cp));
	check(!readable(sch->fd, 200), "no event follows a UD accept on the server", "readable");
	FAILS("rdma_accept again: EINVAL", rdma_accept(sid, &cp), EINVAL);
	e = wait_event(cch, RDMA_CM_EVENT_ESTABLISHED, "client: UD ESTABLISHED");
	if (e) {
		struct rdma_ud_param *u = &e->param.ud;
		uint32_t cport = ntohs(rdma_get_src_port(cid));

		check(e->status == 0 && e->id == cid, "ESTABLISHED for the client's id, status 0",
		      "%d", e->status);
		check(u->qp_num == sid->qp->qp_num && u->qkey == RDMA_UDP_QKEY,
		      "param.ud: the server's QP number and RDMA_UDP_QKEY", "qpn %#x qkey %#x",
		      u->qp_num, u->qkey);
		check(u->ah_attr.is_global == 1 && u->ah_attr.port_num == 1 &&
			      u->ah_attr.grh.sgid_index == 0 && u->ah_attr.grh.hop_limit == 64 &&
			      gid_is(&u->ah_attr.grh.dgid, "127.0.6.1"),
		      "param.ud.ah_attr: GRH to the server's GID, sgid_index 0, hop limit 64, port 1",
		      "global %d port %d hop %d", u->ah_attr.is_global, u->ah_attr.port_num,
		      u->ah_attr.grh.hop_limit);
		check(u->ah_attr.grh.flow_label == ((cport * 31 + 19642) & 0xfffff),
		      "param.ud.ah_attr's flow label is the route's", "%#x",
		      u->ah_attr.grh.flow_label);
		check(u->private_data && u->private_data_len == 136 &&
			      strcmp(u->private_data, "hello-back") == 0,
		      "param.ud has the SIDR_REP's private data (136 bytes)", "len %d",
		      u->private_data_len);
		ah = ibv_create_ah(cid->pd, &u->ah_attr);
		rqpn = u->qp_num;
		rqkey = u->qkey;
		rdma_ack_cm_event(e);
	}
	if (check(ah != NULL, "ibv_create_ah from param.ud.ah_attr", "errno %d", errno)) {
		struct ibv_sge sge = { .addr = (uintptr_t)cbuf, .length = 8, .lkey = cmr->lkey };
		struct ibv_send_wr wr, *bad;
		struct ibv_wc wc;
		int n = 0, i;

		memset(&wr, 0, sizeof wr);
		memcpy(cbuf, "ud-ping", 8);
		wr.wr_id = 2;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = rqpn;
		wr.wr.ud.remote_qkey = rqkey;
		OK0("a UD SEND to the resolved QP", ibv_post_send(cid->qp, &wr, &bad));
		for (i = 0; i < 500 && n == 0; i++) {
			n = ibv_poll_cq(sid->recv_cq, 1, &wc);
			if (n == 0)
				usleep(10000);
		}
		check(n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 8 &&
			      wc.src_qp == cid->qp->qp_num && (wc.wc_flags & IBV_WC_GRH) &&
			      strcmp(sbuf + 40, "ud-ping") == 0,
		      "the server receives it (GRH, the client's QP, the data)",
		      "n %d status %d len %u", n, n == 1 ? (int)wc.status : -1,
		      n == 1 ? wc.byte_len : 0);
	}
	if (ah)
		ibv_destroy_ah(ah);
out_s:
	if (smr)
		ibv_dereg_mr(smr);
	if (cmr)
		ibv_dereg_mr(cmr);
	if (sid->qp)
		rdma_destroy_qp(sid);
	rdma_destroy_id(sid);
out_c:
	if (cid->qp)
		rdma_destroy_qp(cid);
	rdma_destroy_id(cid);

	section("UD: a port nobody listens on (UNREACHABLE 1), a rejection (UNREACHABLE 2)");
	cid = ud_client_to(cch, 19643);
	if (check(cid != NULL, "a UD client to 19643", "-")) {
		OK0("rdma_connect without a QP or parameters", rdma_connect(cid, NULL));
		e = wait_event(cch, RDMA_CM_EVENT_UNREACHABLE, "client: UNREACHABLE");
		if (e) {
			check(e->status == 1, "status 1: the SIDR_REP's 'unsupported service ID'",
			      "%d", e->status);
			rdma_ack_cm_event(e);
		}
		rdma_destroy_id(cid);
	}
	cid = ud_client_to(cch, 19642);
	if (check(cid != NULL, "a UD client to 19642 again", "-")) {
		OK0("rdma_connect", rdma_connect(cid, NULL));
		e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, "server: UD CONNECT_REQUEST");
		if (e) {
			sid = e->id;
			rdma_ack_cm_event(e);
			FAILS("rdma_reject with 137 bytes: EINVAL", rdma_reject(sid, sbuf, 137),
			      EINVAL);
			OK0("rdma_reject with private data", rdma_reject(sid, "go away", 8));
			FAILS("rdma_accept after the reject: EINVAL", rdma_accept(sid, NULL), EINVAL);
			rdma_destroy_id(sid);
		}
		e = wait_event(cch, RDMA_CM_EVENT_UNREACHABLE, "client: UNREACHABLE (rejected)");
		if (e) {
			check(e->status == 2 && e->param.ud.private_data &&
				      strcmp(e->param.ud.private_data, "go away") == 0,
			      "status 2 (rejected) with the SIDR_REP's private data", "%d",
			      e->status);
			rdma_ack_cm_event(e);
		}
		rdma_destroy_id(cid);
	}
out:
	rdma_destroy_id(lid);
	check(!readable(sch->fd, 0) && !readable(cch->fd, 0), "no UD event left", "readable");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

static void walk_not_yet(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id, *req;
	struct rdma_conn_param cp;
	struct sockaddr_in a = sin4("127.0.6.1", 19649);
	struct rdma_cm_join_mc_attr_ex mc;
	struct ibv_ece ece = { .vendor_id = 0x15b3, .options = 1 };

	section("the CM calls on an id without a connection: EINVAL");
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	rdma_bind_addr(id, SA(a));
	memset(&cp, 0, sizeof cp);
	memset(&mc, 0, sizeof mc);
	FAILS("rdma_connect before the route is resolved", rdma_connect(id, &cp), EINVAL);
	FAILS("rdma_accept", rdma_accept(id, &cp), EINVAL);
	FAILS("rdma_reject", rdma_reject(id, NULL, 0), EINVAL);
	FAILS("rdma_reject_ece", rdma_reject_ece(id, NULL, 0), EINVAL);
	FAILS("rdma_disconnect", rdma_disconnect(id), EINVAL);
	FAILS("rdma_notify", rdma_notify(id, IBV_EVENT_COMM_EST), EINVAL);
	FAILS("rdma_establish", rdma_establish(id), EINVAL);
	/* multicast's argument errors (mckey runs the rest, in
	 * tests/rdmacm_programs.rs and against the kernel) */
	FAILS("rdma_join_multicast_ex without RDMA_CM_JOIN_MC_ATTR_ADDRESS: EINVAL",
	      rdma_join_multicast_ex(id, &mc, NULL), EINVAL);
	FAILS("rdma_leave_multicast of an address never joined: EADDRNOTAVAIL",
	      rdma_leave_multicast(id, SA(a)), EADDRNOTAVAIL);
	FAILS("rdma_join_multicast(NULL address): EINVAL", rdma_join_multicast(id, NULL, NULL), EINVAL);
	OK0("rdma_listen on the bound id", rdma_listen(id, 1));
	FAILS("rdma_connect on a listening id: EINVAL", rdma_connect(id, &cp), EINVAL);
	FAILS("rdma_listen(NULL): EINVAL", rdma_listen(NULL, 1), EINVAL);
	FAILS("rdma_connect(NULL): EINVAL", rdma_connect(NULL, &cp), EINVAL);
	FAILS("rdma_get_request on an asynchronous id: EINVAL", rdma_get_request(id, &req), EINVAL);

	section("ECE");
	OK0("rdma_set_local_ece", rdma_set_local_ece(id, &ece));
	ece.vendor_id = 0;
	FAILS("rdma_set_local_ece(vendor_id 0): EINVAL", rdma_set_local_ece(id, &ece), EINVAL);
	memset(&ece, 0xff, sizeof ece);
	OK0("rdma_get_remote_ece", rdma_get_remote_ece(id, &ece));
	check(ece.vendor_id == 0 && ece.options == 0 && ece.comp_mask == 0,
	      "no remote ECE without a connection", "%#x", ece.vendor_id);
	FAILS("rdma_get_remote_ece(NULL): EINVAL", rdma_get_remote_ece(id, NULL), EINVAL);
	rdma_destroy_id(id);

	section("rsockets");
	{
		int p[2];
		struct pollfd pf;
		char c = 'x';

		FAILS("rsocket: ENOSYS", rsocket(AF_INET, SOCK_STREAM, 0), ENOSYS);
		FAILS("rclose of a descriptor that is no rsocket: EBADF", rclose(0), EBADF);
		FAILS("rsend: EBADF", (int)rsend(0, &c, 1, 0), EBADF);
		if (pipe(p) == 0) {
			if (write(p[1], &c, 1) != 1)
				info("write failed");
			pf.fd = p[0];
			pf.events = POLLIN;
			pf.revents = 0;
			check(rpoll(&pf, 1, 0) == 1 && (pf.revents & POLLIN),
			      "rpoll on an ordinary descriptor is poll", "revents %#x", pf.revents);
			close(p[0]);
			close(p[1]);
		}
	}
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;

	if (argc != 2) {
		fprintf(stderr, "usage: rdmacm_walk LIBPATH\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, watchdog);
	alarm(60);

	walk_library(argv[1]);
	walk_devices();
	ch = walk_channel();
	walk_strings();
	walk_ids(ch);
	walk_resolve(ch);
	walk_options(ch);
	walk_qps(ch);
	walk_addrinfo();
	walk_ep();
	walk_connect();
	walk_ud();
	walk_not_yet(ch);

	section("the end");
	check(!readable(ch->fd, 0), "no event left on the channel", "readable");
	rdma_destroy_event_channel(ch);
	rdma_free_devices(devs);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
