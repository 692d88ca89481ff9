/*
 * rdmacm_diff: the same librdmacm calls on two stacks, one canonical line
 * per case (the sibling of verbs_diff.c, with its line format).
 *
 * Compiled against Debian's <rdma/rdma_cma.h> (rdma-core 44). It runs over
 * rxe-rs's drop-in librdmacm.so.1 (`rxe exec`) on the host and over the
 * real librdmacm and the kernel's rdma_cm on rdma_rxe in the interop guest;
 * tests/interop/verbs_diff.sh compares the two outputs with verbs_diff.py.
 *
 * Usage: rdmacm_diff DEVICE
 *
 * DEVICE's RoCE v2 IPv4 GID names the address the cases bind, resolve and
 * connect to. Results never hold what differs from run to run: addresses
 * are printed as names (DEV is the device's address, LO 127.0.0.1, ANY
 * 0.0.0.0, ANY6 ::, LO6 ::1, TEST 192.0.2.1, DEV6 the device's address
 * IPv4-mapped), ports as "0", "P" (the one asked for) or "eph" (one the
 * stack chose), QP numbers not at all. The connected cases connect ids of
 * one process to each other over the device (two event channels, one for
 * each side, so that no case depends on which side's event comes first).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "diff_lines.h"

static struct in_addr dev_ip;
static const char *devname;

/* ---- addresses ------------------------------------------------------------ */

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s = (struct sockaddr_in *)&ss;
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	if (ip)
		inet_pton(AF_INET, ip, &s->sin_addr);
	else
		s->sin_addr = dev_ip;
	return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	if (ip) {
		inet_pton(AF_INET6, ip, &s->sin6_addr);
	} else {
		s->sin6_addr.s6_addr[10] = 0xff;
		s->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&s->sin6_addr.s6_addr[12], &dev_ip, 4);
	}
	return ss;
}

#define SA(ss) ((struct sockaddr *)&(ss))

/* The name of an address and its port ("DEV:P", "ANY:0", "LO:eph"). */
static const char *aname(const struct sockaddr *sa, uint16_t asked)
{
	static char b[4][64];
	static int k;
	char *o = b[k++ % 4];
	const char *n = "?";
	uint16_t port = 0;
	char tmp[INET6_ADDRSTRLEN];
	if (!sa) {
		return "NULL";
	} else if (sa->sa_family == 0) {
		return "NONE";
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		port = ntohs(s->sin_port);
		uint32_t a = ntohl(s->sin_addr.s_addr);
		if (s->sin_addr.s_addr == dev_ip.s_addr)
			n = "DEV";
		else if (a == 0x7f000001)
			n = "LO";
		else if (a == 0)
			n = "ANY";
		else if (a == 0xc0000201)
			n = "TEST";
		else
			n = "v4other";
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		port = ntohs(s->sin6_port);
		struct sockaddr_storage d6 = v6(NULL, 0);
		if (!memcmp(&s->sin6_addr, &((struct sockaddr_in6 *)&d6)->sin6_addr, 16))
			n = "DEV6";
		else if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr))
			n = "LO6";
		else if (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr))
			n = "ANY6";
		else if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr))
			n = "LL6";
		else
			n = inet_ntop(AF_INET6, &s->sin6_addr, tmp, sizeof tmp) ? "v6other" : "v6?";
	} else {
		snprintf(o, 64, "fam%d", sa->sa_family);
		return o;
	}
	snprintf(o, 64, "%s:%s", n, port == 0 ? "0" : (asked && port == asked) ? "P" : "eph");
	return o;
}

/* What an id holds after a call: its device, port, and both addresses. */
static const char *idstate(struct rdma_cm_id *id, uint16_t asked)
{
	static char b[256];
	snprintf(b, sizeof b, "verbs=%s port_num=%u src=%s dst=%s sport=%s",
		 id->verbs ? (strcmp(ibv_get_device_name(id->verbs->device), devname) ? "other" : "dev")
			   : "NULL",
		 id->port_num, aname(rdma_get_local_addr(id), asked),
		 aname(rdma_get_peer_addr(id), asked),
		 rdma_get_src_port(id) == 0 ? "0" : (asked && ntohs(rdma_get_src_port(id)) == asked) ? "P" : "eph");
	return b;
}

/* ---- events --------------------------------------------------------------- */

/* The next event on ch within ms, printed as the result of case id; the
 * event is returned (to be acked by the caller) or NULL. */
static struct rdma_cm_event *event(const char *id, struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1) {
		line(id, "no event within %d ms", ms);
		return NULL;
	}
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e)) {
		line(id, "err %s", ename(errno));
		return NULL;
	}
	char extra[256] = "";
	if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST || e->event == RDMA_CM_EVENT_ESTABLISHED ||
	    e->event == RDMA_CM_EVENT_REJECTED || e->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		if (e->id->ps == RDMA_PS_UDP)
			snprintf(extra, sizeof extra, " pdata_len=%u qkey=0x%x qpn=%s ah_global=%d",
				 e->param.ud.private_data_len, e->param.ud.qkey,
				 e->param.ud.qp_num ? "set" : "0", e->param.ud.ah_attr.is_global);
		else
			snprintf(extra, sizeof extra,
				 " pdata_len=%u resp=%u init=%u flow=%u retry=%u rnr=%u srq=%u qpn=%s",
				 e->param.conn.private_data_len, e->param.conn.responder_resources,
				 e->param.conn.initiator_depth, e->param.conn.flow_control,
				 e->param.conn.retry_count, e->param.conn.rnr_retry_count, e->param.conn.srq,
				 e->param.conn.qp_num ? "set" : "0");
		const uint8_t *pd = e->id->ps == RDMA_PS_UDP ? e->param.ud.private_data
							      : e->param.conn.private_data;
		uint8_t plen = e->id->ps == RDMA_PS_UDP ? e->param.ud.private_data_len
						       : e->param.conn.private_data_len;
		if (pd && plen >= 4) {
			size_t n = strlen(extra);
			snprintf(extra + n, sizeof extra - n, " pdata=%02x%02x%02x%02x", pd[0], pd[1], pd[2], pd[3]);
		}
	}
	line(id, "%s status=%d%s listen=%s", rdma_event_str(e->event), e->status, extra,
	     e->listen_id ? "set" : "NULL");
	return e;
}

/* An event expected within ms: printed, acked, its id returned (for a
 * connection request, the new id). */
static struct rdma_cm_id *take(const char *id, struct rdma_event_channel *ch, int ms)
{
	struct rdma_cm_event *e = event(id, ch, ms);
	if (!e)
		return NULL;
	struct rdma_cm_id *who = e->id;
	rdma_ack_cm_event(e);
	return who;
}

/* ---- cases ---------------------------------------------------------------- */

static struct rdma_event_channel *ch;

static struct rdma_cm_id *new_id(enum rdma_port_space ps)
{
	struct rdma_cm_id *id = NULL;
	if (rdma_create_id(ch, &id, NULL, ps))
		return NULL;
	return id;
}

static void cases_create(void)
{
	static const struct {
		const char *n;
		int ps;
	} pss[] = { { "TCP", RDMA_PS_TCP }, { "UDP", RDMA_PS_UDP }, { "IPOIB", RDMA_PS_IPOIB },
		    { "IB", RDMA_PS_IB }, { "0x999", 0x999 }, { "0", 0 } };
	for (size_t i = 0; i < sizeof pss / sizeof pss[0]; i++) {
		struct rdma_cm_id *id = NULL;
		const char *c = ID("cm.create_id.ps_%s", pss[i].n);
		if (rdma_create_id(ch, &id, NULL, pss[i].ps)) {
			line(c, "err %s", ename(errno));
			continue;
		}
		line(c, "ok qp_type=%d %s", id->qp_type, idstate(id, 0));
		rc_line(ID("cm.create_id.ps_%s.destroy", pss[i].n), rdma_destroy_id(id));
	}
	struct rdma_cm_id *id = NULL;
	int r = rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP);
	line("cm.create_id.sync", r ? "err %s" : "ok channel=%s", r ? ename(errno) : id->channel ? "own" : "NULL");
	if (!r)
		rc_line("cm.create_id.sync.destroy", rdma_destroy_id(id));
}

/* bind one fresh id of ps to ss, print the result and what the id holds */
static void bind_case(const char *name, int ps, struct sockaddr_storage ss)
{
	struct rdma_cm_id *id = new_id(ps);
	uint16_t asked = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		asked = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	const char *c = ID("cm.bind.%s", name);
	if (rdma_bind_addr(id, SA(ss)))
		line(c, "err %s %s", ename(errno), idstate(id, asked));
	else
		line(c, "ok %s", idstate(id, asked));
	rdma_destroy_id(id);
}

static void cases_bind(void)
{
	bind_case("dev.0", RDMA_PS_TCP, v4(NULL, 0));
	bind_case("dev.P", RDMA_PS_TCP, v4(NULL, 7471));
	bind_case("dev.udp", RDMA_PS_UDP, v4(NULL, 7471));
	bind_case("dev.ipoib", RDMA_PS_IPOIB, v4(NULL, 0));
	bind_case("lo", RDMA_PS_TCP, v4("127.0.0.1", 0));
	bind_case("lo.udp", RDMA_PS_UDP, v4("127.0.0.1", 0));
	bind_case("lo.P", RDMA_PS_TCP, v4("127.0.0.1", 7472));
	bind_case("lo2", RDMA_PS_TCP, v4("127.0.0.2", 0));
	bind_case("any", RDMA_PS_TCP, v4("0.0.0.0", 0));
	bind_case("any.P", RDMA_PS_TCP, v4("0.0.0.0", 7473));
	bind_case("any6", RDMA_PS_TCP, v6("::", 0));
	bind_case("lo6", RDMA_PS_TCP, v6("::1", 0));
	bind_case("dev6", RDMA_PS_TCP, v6(NULL, 0));
	bind_case("test", RDMA_PS_TCP, v4("192.0.2.1", 0));
	{
		struct sockaddr_storage u = { .ss_family = AF_UNIX };
		bind_case("af_unix", RDMA_PS_TCP, u);
	}

	/* twice on one id */
	struct rdma_cm_id *a = new_id(RDMA_PS_TCP), *b = new_id(RDMA_PS_TCP), *u = new_id(RDMA_PS_UDP);
	struct sockaddr_storage p = v4(NULL, 7474), any = v4("0.0.0.0", 7474);
	rc_line("cm.bind.once", rdma_bind_addr(a, SA(p)));
	rc_line("cm.bind.twice", rdma_bind_addr(a, SA(p)));
	rc_line("cm.bind.port_taken", rdma_bind_addr(b, SA(p)));
	rc_line("cm.bind.port_taken.other_ps", rdma_bind_addr(u, SA(p)));
	rdma_destroy_id(b);
	b = new_id(RDMA_PS_TCP);
	rc_line("cm.bind.port_taken.any", rdma_bind_addr(b, SA(any)));
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_id(u);
	a = new_id(RDMA_PS_TCP);
	rc_line("cm.bind.port_freed_by_destroy", rdma_bind_addr(a, SA(p)));
	rdma_destroy_id(a);

	/* REUSEADDR on both, neither listening */
	int one = 1;
	a = new_id(RDMA_PS_TCP);
	b = new_id(RDMA_PS_TCP);
	rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
	rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
	rc_line("cm.bind.reuseaddr.first", rdma_bind_addr(a, SA(p)));
	rc_line("cm.bind.reuseaddr.second", rdma_bind_addr(b, SA(p)));
	rc_line("cm.bind.reuseaddr.listen_first", rdma_listen(a, 1));
	rc_line("cm.bind.reuseaddr.listen_second", rdma_listen(b, 1));
	rdma_destroy_id(a);
	rdma_destroy_id(b);
}

static void cases_option(void)
{
	struct rdma_cm_id *id = new_id(RDMA_PS_TCP);
	uint8_t tos = 32, ato = 14;
	int one = 1, four = 4;
	rc_line("cm.opt.tos", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1));
	rc_line("cm.opt.tos.len4", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &four, 4));
	rc_line("cm.opt.reuseaddr", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one));
	rc_line("cm.opt.reuseaddr.len1", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos, 1));
	rc_line("cm.opt.afonly", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one));
	rc_line("cm.opt.ack_timeout", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ato, 1));
	rc_line("cm.opt.bad_name", rdma_set_option(id, RDMA_OPTION_ID, 99, &one, sizeof one));
	rc_line("cm.opt.bad_level", rdma_set_option(id, 99, 0, &one, sizeof one));
	struct sockaddr_storage p = v4(NULL, 0);
	rdma_bind_addr(id, SA(p));
	rc_line("cm.opt.reuseaddr.after_bind", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one));
	rc_line("cm.opt.afonly.after_bind", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one));
	rc_line("cm.opt.tos.after_bind", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1));
	rdma_destroy_id(id);
}

static void cases_listen(void)
{
	struct rdma_cm_id *id = new_id(RDMA_PS_TCP);
	int r = rdma_listen(id, 4);
	line("cm.listen.unbound", r ? "err %s" : "ok %s", r ? ename(errno) : idstate(id, 0));
	rc_line("cm.listen.twice", rdma_listen(id, 4));
	rdma_destroy_id(id);

	struct sockaddr_storage p = v4(NULL, 7475), any = v4("0.0.0.0", 7476), dev76 = v4(NULL, 7476);
	static const int backlogs[] = { 0, 1, -1, 100000 };
	for (size_t i = 0; i < sizeof backlogs / sizeof backlogs[0]; i++) {
		id = new_id(RDMA_PS_TCP);
		rdma_bind_addr(id, SA(p));
		rc_line(ID("cm.listen.backlog_%d", backlogs[i]), rdma_listen(id, backlogs[i]));
		rdma_destroy_id(id);
	}
	struct rdma_cm_id *a = new_id(RDMA_PS_TCP), *b = new_id(RDMA_PS_TCP);
	rdma_bind_addr(a, SA(any));
	rc_line("cm.listen.any", rdma_listen(a, 1));
	r = rdma_bind_addr(b, SA(dev76));
	line("cm.listen.dev_under_any.bind", r ? "err %s" : "ok", r ? ename(errno) : "");
	rdma_destroy_id(a);
	rdma_destroy_id(b);
}

static void cases_resolve(void)
{
	struct sockaddr_storage dst = v4(NULL, 7477);
	/* librdmacm reads id->verbs in rdma_resolve_route: an id with no
	 * device would crash it, so the early case is on a bound id */
	struct rdma_cm_id *id = new_id(RDMA_PS_TCP);
	struct sockaddr_storage bd = v4(NULL, 0);
	rdma_bind_addr(id, SA(bd));
	rc_line("cm.route.bound_only", rdma_resolve_route(id, 1000));
	rdma_destroy_id(id);
	id = new_id(RDMA_PS_TCP);
	rc_line("cm.resolve.dev", rdma_resolve_addr(id, NULL, SA(dst), 2000));
	take("cm.resolve.dev.event", ch, 3000);
	line("cm.resolve.dev.state", "%s", idstate(id, 7477));
	rc_line("cm.resolve.dev.again", rdma_resolve_addr(id, NULL, SA(dst), 2000));
	rc_line("cm.resolve.dev.route", rdma_resolve_route(id, 2000));
	take("cm.resolve.dev.route.event", ch, 3000);
	line("cm.resolve.dev.route.path", "num_paths=%d mtu=%d hop=%u pkey=0x%x sgid=%s",
	     id->route.num_paths, id->route.num_paths ? id->route.path_rec->mtu : -1,
	     id->route.num_paths ? id->route.path_rec->hop_limit : 0,
	     id->route.num_paths ? ntohs(id->route.path_rec->pkey) : 0,
	     id->route.num_paths && !memcmp(&id->route.path_rec->sgid.raw[12], &dev_ip, 4) ? "dev" : "other");
	rc_line("cm.resolve.dev.route.again", rdma_resolve_route(id, 2000));
	if (!rdma_resolve_route(id, 2000))
		take("cm.resolve.dev.route.again.event", ch, 3000);
	rdma_destroy_id(id);

	static const struct {
		const char *n;
		const char *src, *dst;
	} pairs[] = { { "lo", NULL, "127.0.0.1" }, { "any", NULL, "0.0.0.0" },
		      { "any_to_dev", "0.0.0.0", NULL }, { "lo_to_dev", "127.0.0.1", NULL },
		      { "dev_to_lo", "DEV", "127.0.0.1" } };
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		id = new_id(RDMA_PS_TCP);
		struct sockaddr_storage s = v4(pairs[i].src && strcmp(pairs[i].src, "DEV") ? pairs[i].src : NULL, 0);
		struct sockaddr_storage d = v4(pairs[i].dst, 7477);
		int r = rdma_resolve_addr(id, pairs[i].src ? SA(s) : NULL, SA(d), 2000);
		const char *c = ID("cm.resolve.%s", pairs[i].n);
		if (r) {
			line(c, "err %s", ename(errno));
		} else {
			line(c, "ok");
			take(ID("cm.resolve.%s.event", pairs[i].n), ch, 3000);
			line(ID("cm.resolve.%s.state", pairs[i].n), "%s", idstate(id, 7477));
		}
		rdma_destroy_id(id);
	}
	/* v6 destination on a v4 device */
	id = new_id(RDMA_PS_TCP);
	struct sockaddr_storage d6 = v6(NULL, 7477);
	int r = rdma_resolve_addr(id, NULL, SA(d6), 2000);
	if (r) {
		line("cm.resolve.dev6", "err %s", ename(errno));
	} else {
		line("cm.resolve.dev6", "ok");
		take("cm.resolve.dev6.event", ch, 3000);
	}
	rdma_destroy_id(id);
}

/* rdma_destroy_qp, which librdmacm lets crash on an id with no QP */
static void dqp(struct rdma_cm_id *id)
{
	if (id && id->qp)
		rdma_destroy_qp(id);
}

/* Fresh attributes for each rdma_create_qp: librdmacm writes the CQs it
 * made back into them, and rdma_destroy_qp frees those CQs. */
static void qp_caps(struct ibv_qp_init_attr *a, enum ibv_qp_type t)
{
	memset(a, 0, sizeof *a);
	a->qp_type = t;
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
}

static const char *qpstate(struct ibv_qp *qp)
{
	static char b[96];
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	if (!qp)
		return "qp=NULL";
	if (ibv_query_qp(qp, &at, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_PORT | IBV_QP_PKEY_INDEX, &ia))
		return "query failed";
	snprintf(b, sizeof b, "state=%d qkey=0x%x port=%u pkey_index=%u", at.qp_state,
		 qp->qp_type == IBV_QPT_UD ? at.qkey : 0, at.port_num, at.pkey_index);
	return b;
}

/* rdma_create_qp of type t on id (pd NULL: the id's own), printed as case
 * c with the QP's state; the QP stays for the caller. Returns its result. */
static int qp_case(const char *c, struct rdma_cm_id *id, struct ibv_pd *pd, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a;
	qp_caps(&a, t);
	int r = rdma_create_qp(id, pd, &a);
	if (r)
		line(c, "err %s", ename(errno));
	else
		line(c, "ok %s", qpstate(id->qp));
	return r;
}

static void cases_qp(struct ibv_pd *pd)
{
	struct ibv_qp_init_attr a;
	struct rdma_cm_id *id = new_id(RDMA_PS_TCP);
	qp_caps(&a, IBV_QPT_RC);
	rc_line("cm.qp.unbound", rdma_create_qp(id, pd, &a));
	struct sockaddr_storage any = v4("0.0.0.0", 0);
	rdma_bind_addr(id, SA(any));
	qp_caps(&a, IBV_QPT_RC);
	rc_line("cm.qp.bound_any", rdma_create_qp(id, pd, &a));
	rdma_destroy_id(id);

	id = new_id(RDMA_PS_TCP);
	struct sockaddr_storage dev = v4(NULL, 0);
	rdma_bind_addr(id, SA(dev));
	line("cm.qp.bound_dev.context", "%s", id->verbs == pd->context ? "rdma_get_devices'" : "another");
	qp_caps(&a, IBV_QPT_RC);
	int r = rdma_create_qp(id, NULL, &a);
	if (r)
		line("cm.qp.bound_dev.pd_null", "err %s", ename(errno));
	else
		line("cm.qp.bound_dev.pd_null", "ok type=%d %s", id->qp->qp_type, qpstate(id->qp));
	if (!r) {
		line("cm.qp.bound_dev.cqs", "send_cq=%s recv_cq=%s same=%s send_channel=%s recv_channel=%s",
		     id->send_cq ? "set" : "NULL", id->recv_cq ? "set" : "NULL",
		     id->send_cq == id->recv_cq ? "yes" : "no", id->send_cq_channel ? "set" : "NULL",
		     id->recv_cq_channel ? "set" : "NULL");
		rdma_destroy_qp(id);
		line("cm.qp.bound_dev.destroyed", "qp=%s send_cq=%s recv_cq=%s", id->qp ? "set" : "NULL",
		     id->send_cq ? "set" : "NULL", id->recv_cq ? "set" : "NULL");
	}
	qp_case("cm.qp.bound_dev.pd", id, pd, IBV_QPT_RC);
	dqp(id);
	qp_case("cm.qp.tcp_id.ud_qp", id, pd, IBV_QPT_UD);
	dqp(id);
	rdma_destroy_id(id);

	id = new_id(RDMA_PS_UDP);
	rdma_bind_addr(id, SA(dev));
	qp_case("cm.qp.udp_id.ud_qp", id, pd, IBV_QPT_UD);
	dqp(id);
	qp_case("cm.qp.udp_id.rc_qp", id, pd, IBV_QPT_RC);
	dqp(id);
	rdma_destroy_id(id);

	/* an id destroyed with its QP still there */
	id = new_id(RDMA_PS_TCP);
	rdma_bind_addr(id, SA(dev));
	qp_caps(&a, IBV_QPT_RC);
	rc_line("cm.qp.destroy_id_with_qp.create", rdma_create_qp(id, NULL, &a));
	struct ibv_qp *qp = id->qp;
	rc_line("cm.qp.destroy_id_with_qp", rdma_destroy_id(id));
	if (qp)
		rc_line("cm.qp.destroy_id_with_qp.qp_after", ibv_destroy_qp(qp));

	/* the QP destroyed with ibv_destroy_qp, not rdma_destroy_qp, then the
	 * id: librdmacm does not learn of it (id->qp stays) and its
	 * rdma_destroy_id does not look at the QP */
	for (int own = 0; own < 2; own++) {
		const char *c = own ? "cm.qp.ibv_destroy_qp.own_cqs" : "cm.qp.ibv_destroy_qp";
		struct ibv_cq *cq = own ? ibv_create_cq(pd->context, 8, NULL, NULL, 0) : NULL;
		id = new_id(RDMA_PS_TCP);
		rdma_bind_addr(id, SA(dev));
		qp_caps(&a, IBV_QPT_RC);
		a.send_cq = a.recv_cq = cq;
		rc_line(ID("%s.create", c), rdma_create_qp(id, own ? pd : NULL, &a));
		if (id->qp) {
			rc_line(c, ibv_destroy_qp(id->qp));
			line(ID("%s.after", c), "qp=%s", id->qp ? "set" : "NULL");
		}
		rc_line(ID("%s.destroy_id", c), rdma_destroy_id(id));
		if (cq)
			rc_line(ID("%s.cq_after", c), ibv_destroy_cq(cq));
	}
}

/* one side of a connection: an id on its own channel */
struct side {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

static struct rdma_cm_id *client(struct side *c, int ps, uint16_t port, const char *tag)
{
	struct sockaddr_storage d = v4(NULL, port);
	rdma_create_id(c->ch, &c->id, NULL, ps);
	rc_line(ID("%s.resolve_addr", tag), rdma_resolve_addr(c->id, NULL, SA(d), 2000));
	take(ID("%s.addr_event", tag), c->ch, 3000);
	rc_line(ID("%s.resolve_route", tag), rdma_resolve_route(c->id, 2000));
	take(ID("%s.route_event", tag), c->ch, 3000);
	qp_case(ID("%s.create_qp", tag), c->id, NULL, ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
	return c->id;
}

static void cases_connect(void)
{
	struct side s = { rdma_create_event_channel(), NULL }, c = { rdma_create_event_channel(), NULL };
	struct sockaddr_storage p = v4(NULL, 7480);
	rdma_create_id(s.ch, &s.id, NULL, RDMA_PS_TCP);
	rdma_bind_addr(s.id, SA(p));
	rc_line("cm.conn.listen", rdma_listen(s.id, 4));
	struct rdma_conn_param zero = { 0 };
	rc_line("cm.conn.accept_on_listener", rdma_accept(s.id, &zero));
	rc_line("cm.conn.disconnect_listener", rdma_disconnect(s.id));

	/* connect before the route */
	struct rdma_cm_id *early = NULL;
	rdma_create_id(c.ch, &early, NULL, RDMA_PS_TCP);
	struct rdma_conn_param cp = { 0 };
	/* (with a parameter librdmacm would read the id's absent device) */
	rc_line("cm.conn.connect_unresolved", rdma_connect(early, NULL));
	rc_line("cm.conn.disconnect_unconnected", rdma_disconnect(early));
	rdma_destroy_id(early);

	/* accept: private data both ways */
	client(&c, RDMA_PS_TCP, 7480, "cm.conn.a");
	uint8_t req[10] = { 0xa1, 0xa2, 0xa3, 0xa4, 5, 6, 7, 8, 9, 10 }, rep[5] = { 0xb1, 0xb2, 0xb3, 0xb4, 5 };
	cp = (struct rdma_conn_param){ .private_data = req, .private_data_len = sizeof req,
				       .responder_resources = 1, .initiator_depth = 1,
				       .retry_count = 7, .rnr_retry_count = 7 };
	rc_line("cm.conn.a.connect", rdma_connect(c.id, &cp));
	rc_line("cm.conn.a.connect_again", rdma_connect(c.id, &cp));
	struct rdma_cm_id *n = take("cm.conn.a.request", s.ch, 3000);
	if (n) {
		line("cm.conn.a.request.id", "new=%s %s", n == s.id ? "listener" : "new", idstate(n, 7480));
		qp_case("cm.conn.a.server_qp", n, NULL, IBV_QPT_RC);
		struct rdma_conn_param ap = { .private_data = rep, .private_data_len = sizeof rep,
					      .responder_resources = 1, .initiator_depth = 1,
					      .rnr_retry_count = 7 };
		rc_line("cm.conn.a.accept", rdma_accept(n, &ap));
		take("cm.conn.a.client_established", c.ch, 3000);
		take("cm.conn.a.server_established", s.ch, 3000);
		line("cm.conn.a.client_qp", "%s %s", qpstate(c.id->qp), idstate(c.id, 7480));
		line("cm.conn.a.server_qp_after", "%s", qpstate(n->qp));
		rc_line("cm.conn.a.accept_again", rdma_accept(n, &ap));
		rc_line("cm.conn.a.disconnect", rdma_disconnect(c.id));
		take("cm.conn.a.client_disconnected", c.ch, 3000);
		take("cm.conn.a.server_disconnected", s.ch, 3000);
		line("cm.conn.a.client_qp_after_disc", "%s", qpstate(c.id->qp));
		line("cm.conn.a.server_qp_after_disc", "%s", qpstate(n->qp));
		rc_line("cm.conn.a.disconnect_again", rdma_disconnect(c.id));
		rc_line("cm.conn.a.server_disconnect_after", rdma_disconnect(n));
		dqp(n);
		rc_line("cm.conn.a.server_destroy", rdma_destroy_id(n));
	}
	dqp(c.id);
	rc_line("cm.conn.a.client_destroy", rdma_destroy_id(c.id));

	/* reject with private data */
	client(&c, RDMA_PS_TCP, 7480, "cm.conn.r");
	rc_line("cm.conn.r.connect", rdma_connect(c.id, &cp));
	n = take("cm.conn.r.request", s.ch, 3000);
	if (n) {
		rc_line("cm.conn.r.reject", rdma_reject(n, rep, sizeof rep));
		take("cm.conn.r.client_rejected", c.ch, 3000);
		line("cm.conn.r.client_qp", "%s", qpstate(c.id->qp));
		rc_line("cm.conn.r.reject_again", rdma_reject(n, NULL, 0));
		rc_line("cm.conn.r.server_destroy", rdma_destroy_id(n));
	}
	dqp(c.id);
	rdma_destroy_id(c.id);

	/* the server disconnects first */
	client(&c, RDMA_PS_TCP, 7480, "cm.conn.sd");
	rdma_connect(c.id, &cp);
	n = take("cm.conn.sd.request", s.ch, 3000);
	if (n) {
		struct ibv_qp_init_attr a;
		qp_caps(&a, IBV_QPT_RC);
		rdma_create_qp(n, NULL, &a);
		rdma_accept(n, NULL);
		take("cm.conn.sd.client_established", c.ch, 3000);
		take("cm.conn.sd.server_established", s.ch, 3000);
		rc_line("cm.conn.sd.disconnect", rdma_disconnect(n));
		take("cm.conn.sd.server_disconnected", s.ch, 3000);
		take("cm.conn.sd.client_disconnected", c.ch, 3000);
		dqp(n);
		rdma_destroy_id(n);
	}
	dqp(c.id);
	rdma_destroy_id(c.id);

	/* nobody listens on the port */
	client(&c, RDMA_PS_TCP, 7489, "cm.conn.nl");
	rc_line("cm.conn.nl.connect", rdma_connect(c.id, &cp));
	take("cm.conn.nl.event", c.ch, 5000);
	dqp(c.id);
	rdma_destroy_id(c.id);

	/* private data too long for a REQ (56 bytes after rdma_cm's header) */
	client(&c, RDMA_PS_TCP, 7480, "cm.conn.big");
	uint8_t big[57] = { 0 };
	cp.private_data = big;
	cp.private_data_len = sizeof big;
	rc_line("cm.conn.big.connect_57", rdma_connect(c.id, &cp));
	cp.private_data_len = 56;
	rc_line("cm.conn.big.connect_56", rdma_connect(c.id, &cp));
	n = take("cm.conn.big.request", s.ch, 3000);
	if (n) {
		rc_line("cm.conn.big.reject", rdma_reject(n, NULL, 0));
		take("cm.conn.big.client_rejected", c.ch, 3000);
		rdma_destroy_id(n);
	}
	dqp(c.id);
	rdma_destroy_id(c.id);
	rdma_destroy_id(s.id);

	/* UD: the SIDR exchange */
	struct sockaddr_storage up = v4(NULL, 7481);
	rdma_create_id(s.ch, &s.id, NULL, RDMA_PS_UDP);
	rdma_bind_addr(s.id, SA(up));
	rc_line("cm.ud.listen", rdma_listen(s.id, 4));
	client(&c, RDMA_PS_UDP, 7481, "cm.ud");
	cp = (struct rdma_conn_param){ .private_data = req, .private_data_len = sizeof req };
	rc_line("cm.ud.connect", rdma_connect(c.id, &cp));
	n = take("cm.ud.request", s.ch, 3000);
	if (n) {
		qp_case("cm.ud.server_qp", n, NULL, IBV_QPT_UD);
		struct rdma_conn_param ap = { .private_data = rep, .private_data_len = sizeof rep,
					      .qp_num = n->qp ? n->qp->qp_num : 0 };
		rc_line("cm.ud.accept", rdma_accept(n, &ap));
		take("cm.ud.client_established", c.ch, 3000);
		rc_line("cm.ud.disconnect", rdma_disconnect(c.id));
		dqp(n);
		rdma_destroy_id(n);
	}
	dqp(c.id);
	rdma_destroy_id(c.id);

	/* UD rejected */
	client(&c, RDMA_PS_UDP, 7481, "cm.udr");
	rc_line("cm.udr.connect", rdma_connect(c.id, &cp));
	n = take("cm.udr.request", s.ch, 3000);
	if (n) {
		rc_line("cm.udr.reject", rdma_reject(n, rep, sizeof rep));
		take("cm.udr.client_event", c.ch, 3000);
		rdma_destroy_id(n);
	}
	dqp(c.id);
	rdma_destroy_id(c.id);
	rdma_destroy_id(s.id);
	rdma_destroy_event_channel(s.ch);
	rdma_destroy_event_channel(c.ch);
}

/* rdma_getaddrinfo: numeric hosts only (the guest has no /etc/hosts) */
static void cases_getaddrinfo(void)
{
	char devs[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &dev_ip, devs, sizeof devs);
	static const struct {
		const char *n, *node, *service;
		int flags, family;
	} g[] = {
		{ "dev.passive", "DEV", NULL, RAI_PASSIVE | RAI_NUMERICHOST, 0 },
		{ "dev.active", "DEV", "7490", RAI_NUMERICHOST, 0 },
		{ "lo.passive", "127.0.0.1", NULL, RAI_PASSIVE | RAI_NUMERICHOST, 0 },
		{ "lo.active", "127.0.0.1", "7490", RAI_NUMERICHOST, 0 },
		{ "null.passive", NULL, "7490", RAI_PASSIVE, 0 },
		{ "null.passive.family", NULL, "7490", RAI_PASSIVE | RAI_FAMILY, AF_INET },
		{ "test.active", "192.0.2.1", "7490", RAI_NUMERICHOST, 0 },
		{ "lo6.active", "::1", "7490", RAI_NUMERICHOST, 0 },
		{ "null.null", NULL, NULL, 0, 0 },
	};
	for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
		struct rdma_addrinfo h = { .ai_flags = g[i].flags, .ai_family = g[i].family,
					   .ai_port_space = RDMA_PS_TCP, .ai_qp_type = IBV_QPT_RC }, *res = NULL;
		const char *node = g[i].node && !strcmp(g[i].node, "DEV") ? devs : g[i].node;
		const char *c = ID("cm.gai.%s", g[i].n);
		int r = rdma_getaddrinfo(node, g[i].service, &h, &res);
		if (r) {
			line(c, "err r=%d %s", r, ename(errno));
			continue;
		}
		char out[512] = "ok";
		size_t len = 2;
		for (struct rdma_addrinfo *a = res; a && len < sizeof out - 100; a = a->ai_next)
			len += snprintf(out + len, sizeof out - len,
					" [fam=%d flags=0x%x qpt=%d ps=0x%x src=%s dst=%s]", a->ai_family,
					a->ai_flags, a->ai_qp_type, a->ai_port_space,
					aname(a->ai_src_addr, 7490), aname(a->ai_dst_addr, 7490));
		line(c, "%s", out);
		rdma_freeaddrinfo(res);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
		return 2;
	}
	devname = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	watchdog(240);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	struct ibv_port_attr pa;
	if (!ctx || ibv_query_port(ctx, 1, &pa)) {
		fprintf(stderr, "rdmacm_diff: cannot open %s\n", argv[1]);
		return 2;
	}
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		static const uint8_t m[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (!ibv_query_gid_ex(ctx, 1, i, &e, 0) && e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    !memcmp(e.gid.raw, m, 12)) {
			memcpy(&dev_ip, &e.gid.raw[12], 4);
			break;
		}
	}
	if (!dev_ip.s_addr) {
		fprintf(stderr, "rdmacm_diff: %s has no RoCE v2 IPv4 GID\n", argv[1]);
		return 2;
	}
	/* rdma_cm's own context of the device, for its QPs' protection domain */
	int nd;
	struct ibv_context **cms = rdma_get_devices(&nd), *cmctx = NULL;
	for (int i = 0; cms && i < nd; i++)
		if (!strcmp(ibv_get_device_name(cms[i]->device), argv[1]))
			cmctx = cms[i];
	line("cm.get_devices", "%s", cmctx ? "has dev" : "no dev");
	struct ibv_pd *pd = cmctx ? ibv_alloc_pd(cmctx) : NULL;

	ch = rdma_create_event_channel();
	line("cm.channel", "%s", ch ? "ok" : "null");
	cases_create();
	cases_bind();
	cases_option();
	cases_listen();
	cases_resolve();
	cases_qp(pd);
	cases_connect();
	cases_getaddrinfo();
	rdma_destroy_event_channel(ch);
	if (pd)
		ibv_dealloc_pd(pd);
	rdma_free_devices(cms);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("END\n");
	return 0;
}
