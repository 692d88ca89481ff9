/*
 * native_passthrough: soft and native devices side by side in one process,
 * over the drop-in libibverbs.so.1 of rxe-rs (tests/ibverbs_native.rs builds
 * and runs it with RXE_PROVIDER, RXE_LIBIBVERBS and RXE_DEVICES set).
 *
 * Compiled against Debian's <infiniband/verbs.h> and linked with -libverbs,
 * as any libibverbs program is. It prints:
 *   dev I NAME          for each device ibv_get_device_list returns, in order
 *   list NULL ERRNO     if it returns NULL instead
 *   map PATH            each mapped file whose name has "verbs" in it
 *   ok NAME / FAIL NAME: details    one line per check
 *   bench NAME NS       nanoseconds per call (with NATIVE_PASSTHROUGH_BENCH=N)
 * and last "N passed, M failed"; the exit status is nonzero on a failure.
 *
 * With a device named "fake0" (the tests' fake libibverbs, see
 * rxe-verbs/src/native/fake_ibverbs.c) it walks the native path: the
 * device's name and GUID, open, queries, PD, MR, completion channel, CQ,
 * RC QPs through to RTS, SEND and RDMA WRITE between them (through the
 * provider's context->ops), completion events, an error completion and its
 * QP fatal async event, SRQ, AH, errno across the call, destroy. With
 * devices "rxe0" and "rxe1" it moves data between them over the soft stack
 * (RC SEND and RDMA WRITE on loopback). With both, a soft PD and a native
 * CQ are refused together.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"


static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static const int ALL_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

/* Polls cq until n completions arrived or 5 s passed; returns how many. */
static int wait_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	long long end = now_ns() + 5000000000LL;
	int got = 0;

	while (got < n && now_ns() < end) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		if (r < 0)
			return -1;
		got += r;
		if (!r)
			usleep(100);
	}
	return got;
}

/* RESET -> INIT -> RTR -> RTS for an RC QP talking to remote_qpn at dgid,
 * from source GID index sgid; 0 or the first error. */
static int bring_up(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *dgid, int sgid)
{
	struct ibv_qp_attr a;
	int r;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = ALL_ACCESS;
	r = ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (r)
		return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = 0x100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = sgid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	r = ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER);
	if (r)
		return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x100;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof ia);
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &ia);
}

static int post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { (uintptr_t)addr, len, lkey };
	struct ibv_recv_wr wr, *bad;

	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

static int post_send(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, void *addr,
		     uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)addr, len, lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* ---- the native device (the fake libibverbs) -------------------------------- */

static void native_walk(struct ibv_device *dev)
{
	static char buf[2][8192];
	const char *name = ibv_get_device_name(dev);
	struct ibv_context *ctx;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid g3;
	struct ibv_gid_entry ge;
	struct ibv_pd *pd;
	struct ibv_mr *mr[2];
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *bad_cq, *ev_cq = NULL;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	struct ibv_wc wc[4];
	struct ibv_async_event ae;
	struct ibv_srq_init_attr si;
	struct ibv_srq_attr sa;
	struct ibv_srq *srq;
	struct ibv_ah_attr aha;
	struct ibv_ah *ah;
	struct pollfd pfd;
	void *ev_ctx = NULL;
	uint16_t pkey;
	int r, n, cq_marker = 0;

	check(name && strcmp(name, "fake0") == 0, "native_device_name", "got %s",
	      name ? name : "NULL");
	check(ibv_get_device_guid(dev) == htobe64(0x0002c9fffe000001ULL), "native_device_guid",
	      "got %#llx", (unsigned long long)be64toh(ibv_get_device_guid(dev)));
	ctx = ibv_open_device(dev);
	if (!check(ctx != NULL, "native_open_device", "%s", strerror(errno)))
		return;
	check(ctx->device == dev, "native_context_device", "ctx->device %p, device %p",
	      (void *)ctx->device, (void *)dev);

	/* A call that succeeds leaves the program's errno alone. */
	errno = 4242;
	r = ibv_query_device(ctx, &da);
	check(r == 0 && strcmp(da.fw_ver, "fake-1.0") == 0 && da.vendor_id == 0x1234 &&
		      da.hw_ver == 7,
	      "native_query_device", "r=%d fw_ver=%s vendor_id=%#x", r, da.fw_ver, da.vendor_id);
	check(errno == 4242, "native_errno_kept", "errno %d after a successful call", errno);
	/* The inline ibv_query_port goes to the provider's extended
	 * query_port (2048); the exported compat one would say 1024. */
	r = ibv_query_port(ctx, 1, &pa);
	check(r == 0 && pa.active_mtu == IBV_MTU_2048 && pa.state == IBV_PORT_ACTIVE,
	      "native_query_port", "r=%d active_mtu=%d", r, pa.active_mtu);
	r = ibv_query_gid(ctx, 1, 3, &g3);
	check(r == 0 && g3.raw[10] == 0xff && g3.raw[11] == 0xff && g3.raw[12] == 127 &&
		      g3.raw[14] == 77 && g3.raw[15] == 99,
	      "native_query_gid", "r=%d", r);
	r = ibv_query_gid_ex(ctx, 1, 3, &ge, 0);
	check(r == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.ndev_ifindex == 2,
	      "native_query_gid_ex", "r=%d type=%d", r, ge.gid_type);
	/* A verb the fake does not export stays with the drop-in, which does
	 * not know the context: an error, not a crash. */
	errno = 0;
	r = ibv_query_pkey(ctx, 1, 0, &pkey);
	check(r != 0, "native_verb_missing_in_system_library", "r=%d", r);

	pd = ibv_alloc_pd(ctx);
	if (!check(pd && pd->context == ctx, "native_alloc_pd", "%s", strerror(errno)))
		return;
	for (n = 0; n < 2; n++) {
		mr[n] = ibv_reg_mr(pd, buf[n], sizeof buf[n], ALL_ACCESS);
		/* The fake's keys: 0x1000 + handle and 0x2000 + handle. */
		check(mr[n] && mr[n]->context == ctx && mr[n]->lkey == 0x1000 + mr[n]->handle &&
			      mr[n]->rkey == 0x2000 + mr[n]->handle,
		      "native_reg_mr", "mr %p lkey %#x handle %u", (void *)mr[n],
		      mr[n] ? mr[n]->lkey : 0, mr[n] ? mr[n]->handle : 0);
		if (!mr[n])
			return;
	}
	ch = ibv_create_comp_channel(ctx);
	if (!check(ch && ch->context == ctx && ch->fd >= 0, "native_create_comp_channel", "%s",
		   strerror(errno)))
		return;
	/* A failing call's errno comes back from the system library's own C
	 * library (its link-map namespace has one of its own). */
	errno = 0;
	bad_cq = ibv_create_cq(ctx, 0, NULL, NULL, 0);
	check(bad_cq == NULL && errno == EINVAL, "native_errno_returned",
	      "cq %p errno %d (want NULL and EINVAL)", (void *)bad_cq, errno);
	cq = ibv_create_cq(ctx, 16, &cq_marker, ch, 0);
	if (!check(cq && cq->context == ctx && cq->channel == ch, "native_create_cq", "%s",
		   strerror(errno)))
		return;
	qa = rc_qp(pd, cq);
	qb = rc_qp(pd, cq);
	/* The fake numbers its QPs from 0x11 on; rxe-rs's are random. */
	if (!check(qa && qb && qa->qp_num >= 0x11 && qa->qp_num < 0x100 && qa->context == ctx,
		   "native_create_qp", "%s", strerror(errno)))
		return;
	r = bring_up(qa, qb->qp_num, &g3, 3);
	if (!r)
		r = bring_up(qb, qa->qp_num, &g3, 3);
	check(r == 0, "native_modify_qp", "%s", strerror(r));
	r = ibv_query_qp(qa, &qattr, IBV_QP_STATE, &qinit);
	check(r == 0 && qattr.qp_state == IBV_QPS_RTS && qinit.send_cq == cq, "native_query_qp",
	      "r=%d state=%d", r, qattr.qp_state);

	/* SEND through the provider's ops, with a completion event. */
	strcpy(buf[0], "through the system library");
	r = ibv_req_notify_cq(cq, 0);
	check(r == 0, "native_req_notify_cq", "%d", r);
	r = post_recv(qb, 7, buf[1], 64, mr[1]->lkey);
	check(r == 0, "native_post_recv", "%d", r);
	r = post_send(qa, 8, IBV_WR_SEND, buf[0], 27, mr[0]->lkey, 0, 0);
	check(r == 0, "native_post_send", "%d", r);
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	check(poll(&pfd, 1, 5000) == 1, "native_channel_fd_readable", "%s", strerror(errno));
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(r == 0 && ev_cq == cq && ev_ctx == &cq_marker, "native_get_cq_event", "r=%d", r);
	if (r == 0)
		ibv_ack_cq_events(ev_cq, 1);
	n = wait_cq(cq, 2, wc);
	check(n == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
	      "native_poll_cq", "got %d", n);
	check(strcmp(buf[1], "through the system library") == 0, "native_send_data", "got %.27s",
	      buf[1]);

	/* RDMA WRITE. */
	memset(buf[0], 0x5a, 4096);
	r = post_send(qa, 9, IBV_WR_RDMA_WRITE, buf[0], 4096, mr[0]->lkey,
		      (uintptr_t)buf[1] + 4096, mr[1]->rkey);
	n = wait_cq(cq, 1, wc);
	check(r == 0 && n == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RDMA_WRITE &&
		      memcmp(buf[0], buf[1] + 4096, 4096) == 0,
	      "native_rdma_write", "r=%d n=%d status=%d", r, n, n ? wc[0].status : -1);

	/* A bad rkey: an error completion and a QP fatal async event. */
	r = post_send(qa, 10, IBV_WR_RDMA_WRITE, buf[0], 8, mr[0]->lkey, (uintptr_t)buf[1],
		      0xdead);
	n = wait_cq(cq, 1, wc);
	check(r == 0 && n == 1 && wc[0].status == IBV_WC_REM_ACCESS_ERR, "native_error_completion",
	      "r=%d n=%d status=%d", r, n, n ? wc[0].status : -1);
	r = ibv_get_async_event(ctx, &ae);
	check(r == 0 && ae.event_type == IBV_EVENT_QP_FATAL && ae.element.qp == qa,
	      "native_async_event", "r=%d type=%d", r, ae.event_type);
	if (r == 0)
		ibv_ack_async_event(&ae);

	/* SRQ and AH. */
	memset(&si, 0, sizeof si);
	si.attr.max_wr = 8;
	si.attr.max_sge = 1;
	srq = ibv_create_srq(pd, &si);
	if (check(srq && srq->context == ctx, "native_create_srq", "%s", strerror(errno))) {
		memset(&sa, 0, sizeof sa);
		sa.srq_limit = 2;
		check(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "native_modify_srq", "failed");
		check(ibv_destroy_srq(srq) == 0, "native_destroy_srq", "failed");
	}
	memset(&aha, 0, sizeof aha);
	aha.is_global = 1;
	aha.grh.dgid = g3;
	aha.grh.sgid_index = 3;
	aha.port_num = 1;
	ah = ibv_create_ah(pd, &aha);
	if (check(ah && ah->context == ctx, "native_create_ah", "%s", strerror(errno)))
		check(ibv_destroy_ah(ah) == 0, "native_destroy_ah", "failed");

	/* Destroy, in order. */
	check(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "native_destroy_qp", "failed");
	check(ibv_destroy_cq(cq) == 0, "native_destroy_cq", "failed");
	check(ibv_destroy_comp_channel(ch) == 0, "native_destroy_comp_channel", "failed");
	check(ibv_dereg_mr(mr[0]) == 0 && ibv_dereg_mr(mr[1]) == 0, "native_dereg_mr", "failed");
	check(ibv_dealloc_pd(pd) == 0, "native_dealloc_pd", "failed");
	check(ibv_close_device(ctx) == 0, "native_close_device", "failed");
}

/* ---- two soft devices (rxe0, rxe1) ------------------------------------------ */

static void bench(struct ibv_device *dev, struct ibv_cq *cq)
{
	const char *s = getenv("NATIVE_PASSTHROUGH_BENCH");
	long i, n = s ? atol(s) : 0;
	long long t;
	volatile uint64_t sink = 0;

	if (n <= 0)
		return;
	t = now_ns();
	for (i = 0; i < n; i++)
		sink += ibv_get_device_guid(dev);
	printf("bench ibv_get_device_guid %.1f\n", (double)(now_ns() - t) / n);
	t = now_ns();
	for (i = 0; i < n; i++)
		ibv_ack_cq_events(cq, 0);
	printf("bench ibv_ack_cq_events %.1f\n", (double)(now_ns() - t) / n);
	(void)sink;
}

static void soft_walk(struct ibv_device *d0, struct ibv_device *d1)
{
	static char buf[2][8192];
	struct ibv_device *dev[2] = { d0, d1 };
	struct ibv_context *ctx[2];
	struct ibv_pd *pd[2];
	struct ibv_mr *mr[2];
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	union ibv_gid gid[2];
	struct ibv_wc wc[2];
	int i, r, n;

	for (i = 0; i < 2; i++) {
		ctx[i] = ibv_open_device(dev[i]);
		if (!check(ctx[i] != NULL, "soft_open_device", "rxe%d: %s", i, strerror(errno)))
			return;
		pd[i] = ibv_alloc_pd(ctx[i]);
		mr[i] = pd[i] ? ibv_reg_mr(pd[i], buf[i], sizeof buf[i], ALL_ACCESS) : NULL;
		cq[i] = ibv_create_cq(ctx[i], 16, NULL, NULL, 0);
		qp[i] = pd[i] && cq[i] ? rc_qp(pd[i], cq[i]) : NULL;
		r = ibv_query_gid(ctx[i], 1, 0, &gid[i]);
		if (!check(pd[i] && mr[i] && cq[i] && qp[i] && r == 0, "soft_objects", "rxe%d: %s",
			   i, strerror(errno)))
			return;
	}
	r = bring_up(qp[0], qp[1]->qp_num, &gid[1], 0);
	if (!r)
		r = bring_up(qp[1], qp[0]->qp_num, &gid[0], 0);
	if (!check(r == 0, "soft_connect", "%s", strerror(r)))
		return;

	for (i = 0; i < 4096; i++)
		buf[0][i] = (char)(i * 7 + 3);
	r = post_send(qp[0], 1, IBV_WR_RDMA_WRITE, buf[0], 4096, mr[0]->lkey,
		      (uintptr_t)buf[1] + 4096, mr[1]->rkey);
	n = wait_cq(cq[0], 1, wc);
	check(r == 0 && n == 1 && wc[0].status == IBV_WC_SUCCESS &&
		      memcmp(buf[0], buf[1] + 4096, 4096) == 0,
	      "soft_rdma_write", "r=%d n=%d status=%s", r, n,
	      n == 1 ? ibv_wc_status_str(wc[0].status) : "-");
	strcpy(buf[0], "over the soft stack");
	r = post_recv(qp[1], 2, buf[1], 64, mr[1]->lkey);
	if (!r)
		r = post_send(qp[0], 3, IBV_WR_SEND, buf[0], 20, mr[0]->lkey, 0, 0);
	n = wait_cq(cq[1], 1, wc);
	check(r == 0 && n == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].byte_len == 20 &&
		      strcmp(buf[1], "over the soft stack") == 0,
	      "soft_send", "r=%d n=%d", r, n);
	wait_cq(cq[0], 1, wc);

	bench(dev[0], cq[0]);

	for (i = 0; i < 2; i++) {
		r = ibv_destroy_qp(qp[i]) | ibv_destroy_cq(cq[i]) | ibv_dereg_mr(mr[i]) |
		    ibv_dealloc_pd(pd[i]) | ibv_close_device(ctx[i]);
		check(r == 0, "soft_destroy", "rxe%d", i);
	}
}

/* A soft PD with a native CQ: the drop-in does not know the CQ and refuses
 * it, as objects of two devices do not mix. */
static void mix_walk(struct ibv_device *native, struct ibv_device *soft)
{
	struct ibv_context *nctx = ibv_open_device(native), *sctx = ibv_open_device(soft);
	struct ibv_pd *spd = sctx ? ibv_alloc_pd(sctx) : NULL;
	struct ibv_cq *ncq = nctx ? ibv_create_cq(nctx, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp *qp;

	if (!check(nctx && sctx && spd && ncq, "mix_objects", "%s", strerror(errno)))
		return;
	errno = 0;
	qp = rc_qp(spd, ncq);
	check(qp == NULL && errno == EINVAL, "mix_soft_pd_native_cq_refused", "qp %p errno %d",
	      (void *)qp, errno);
	check(ibv_destroy_cq(ncq) == 0 && ibv_dealloc_pd(spd) == 0 && ibv_close_device(sctx) == 0 &&
		      ibv_close_device(nctx) == 0,
	      "mix_destroy", "failed");
}

static void maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096], last[4096] = "";

	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *p = strchr(line, '/');

		if (!p || !strstr(p, "verbs"))
			continue;
		p[strcspn(p, "\n")] = 0;
		if (strcmp(p, last) != 0)
			printf("map %s\n", p);
		snprintf(last, sizeof last, "%s", p);
	}
	fclose(f);
}

int main(void)
{
	struct ibv_device **list, *fake = NULL, *rxe0 = NULL, *rxe1 = NULL;
	int n = -1, i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	check(ibv_fork_init() == 0, "fork_init", "failed");
	list = ibv_get_device_list(&n);
	if (!list) {
		printf("list NULL %d\n", errno);
		maps();
		printf("%d passed, %d failed\n", passed, failed);
		return failed ? 1 : 0;
	}
	for (i = 0; list[i]; i++) {
		const char *name = ibv_get_device_name(list[i]);

		printf("dev %d %s\n", i, name ? name : "(null)");
		if (name && strcmp(name, "fake0") == 0)
			fake = list[i];
		if (name && strcmp(name, "rxe0") == 0)
			rxe0 = list[i];
		if (name && strcmp(name, "rxe1") == 0)
			rxe1 = list[i];
	}
	check(i == n, "device_count", "%d listed, num_devices %d", i, n);
	maps();
	if (fake)
		native_walk(fake);
	if (rxe0 && rxe1)
		soft_walk(rxe0, rxe1);
	if (fake && rxe0)
		mix_walk(fake, rxe0);
	ibv_free_device_list(list);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
