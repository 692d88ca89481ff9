/*
 * fake_ibverbs.c - a stand-in for libibverbs.so.1, for testing rxe-verbs'
 * native backend on a machine without RDMA hardware.
 *
 * Compiled against the real <infiniband/verbs.h> (so every struct it hands
 * out has the C compiler's layout, not rxe-verbs' transcription), it exports
 * the functions rxe-verbs resolves with dlsym and fills in the context's ops
 * table (poll_cq, req_notify_cq, post_send, post_recv, post_srq_recv) and an
 * extended verbs_context with query_port, which is how a real provider
 * serves libibverbs' inline fast paths. It does NOT export ibv_post_send and
 * friends: they are inline in verbs.h, and a caller that looked them up
 * would fail here as it would with the real library.
 *
 * One device, "fake0", port 1, with a GID table like the kernel's rxe on an
 * interface with 127.0.77.99: index 0/1 fe80::1 RoCE v1/v2, 2/3
 * ::ffff:127.0.77.99 RoCE v1/v2. Work requests execute synchronously in
 * post_send between QPs of the process (RC/UC by dest_qp_num, UD by
 * remote_qpn): SEND (with immediate / invalidate), WRITE (with immediate),
 * READ, compare-and-swap, fetch-and-add; keys and access rights are checked
 * as a responder would (remote access errors complete with
 * IBV_WC_REM_ACCESS_ERR). modify_qp refuses an address vector whose source
 * GID is not RoCE v2 (indices 1 and 3), as RoCE v2 hardware would not talk
 * to a RoCE v2 peer through it.
 *
 * The exported ibv_query_port (the compat symbol) reports active MTU 1024
 * and the extended query_port 2048, so a test can tell which one was used.
 * FAKE_IBVERBS_NO_DEVICES=1 makes ibv_get_device_list return an empty list.
 * FAKE_IBVERBS_TRACE=FILE appends "init" to FILE when the library is loaded
 * and the name of every exported function when it is called, one a line
 * (tests/ibverbs_native.rs reads it to tell which calls the drop-in
 * libibverbs forwarded here, and that nothing loaded it when it should not).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>

#undef ibv_query_port
#undef ibv_reg_mr

/* FAKE_IBVERBS_TRACE=FILE: the constructor appends "init" to FILE, and every
 * exported function its own name, one a line (how a test tells which calls
 * reached this library, and that it was loaded at all). */
static int trace_fd = -1;

static void trace(const char *fn)
{
	char line[128];
	int n;
	if (trace_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%s\n", fn);
	if (n > 0 && write(trace_fd, line, (size_t)n) != n)
		abort();
}
#define TRACE() trace(__func__)

__attribute__((constructor)) static void fake_init(void)
{
	const char *path = getenv("FAKE_IBVERBS_TRACE");
	if (path && *path) {
		trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		trace("init");
	}
}

#define MAX_SGE 16
#define NGIDS 4

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_handle = 1;
static uint32_t next_qpn = 0x11;

static struct ibv_device fake_dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "fake0",
	.dev_name = "uverbs0",
};
static struct ibv_device *dev_list[2] = { &fake_dev, NULL };
static struct ibv_device *empty_list[1] = { NULL };

static const uint8_t gid_table[NGIDS][16] = {
	{ 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
	{ 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
	{ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 77, 99 },
	{ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 77, 99 },
};
static int gid_is_v2(int i) { return i == 1 || i == 3; }

/* --------------------------------------------------------------- objects -- */

struct fctx {
	struct verbs_context vctx; /* the ibv_context is its last member */
	int async_r, async_w;
};

struct fmr {
	struct ibv_mr mr;
	uint64_t iova;
	int access;
	struct fmr *next;
};
static struct fmr *mrs;

struct fchan {
	struct ibv_comp_channel ch;
	int wfd;
};

struct fcq {
	struct ibv_cq cq;
	struct ibv_wc *ring;
	int head, count, cap;
	int armed, solicited_only;
};

struct rwqe {
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sge[MAX_SGE];
};

struct rq {
	struct rwqe *q;
	int head, count, cap;
};

struct fsrq {
	struct ibv_srq srq;
	struct rq rq;
	uint32_t limit;
};

struct fqp {
	struct ibv_qp qp;
	struct ibv_qp_attr attr;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	struct rq rq;
	struct fqp *next;
};
static struct fqp *qps;

struct fah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
};

static struct fctx *fctx_of(struct ibv_context *c)
{
	return (struct fctx *)((char *)c - offsetof(struct fctx, vctx.context));
}

static void async_event(struct ibv_context *c, enum ibv_event_type t, void *obj)
{
	struct ibv_async_event e;
	memset(&e, 0, sizeof(e));
	e.event_type = t;
	e.element.qp = obj;
	if (write(fctx_of(c)->async_w, &e, sizeof(e)) != sizeof(e))
		abort();
}

/* ----------------------------------------------------------- device list -- */

struct ibv_device **ibv_get_device_list(int *num)
{
	TRACE();
	const char *none = getenv("FAKE_IBVERBS_NO_DEVICES");
	int empty = none && strcmp(none, "1") == 0;
	if (num)
		*num = empty ? 0 : 1;
	return empty ? empty_list : dev_list;
}

void ibv_free_device_list(struct ibv_device **list) { TRACE(); (void)list; }

const char *ibv_get_device_name(struct ibv_device *d) { TRACE(); return d->name; }

__be64 ibv_get_device_guid(struct ibv_device *d)
{
	TRACE();
	(void)d;
	return htobe64(0x0002c9fffe000001ULL);
}

/* --------------------------------------------------------------- context -- */

static int f_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);
static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int f_req_notify_cq(struct ibv_cq *cq, int solicited_only);
static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int f_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	TRACE();
	struct fctx *f = calloc(1, sizeof(*f));
	int p[2];
	if (!f)
		return NULL;
	if (pipe2(p, O_CLOEXEC) != 0) {
		free(f);
		return NULL;
	}
	f->async_r = p[0];
	f->async_w = p[1];
	f->vctx.sz = sizeof(struct verbs_context);
	f->vctx.query_port = f_query_port_ex;
	struct ibv_context *c = &f->vctx.context;
	c->device = d;
	c->cmd_fd = -1;
	c->async_fd = f->async_r;
	c->num_comp_vectors = 1;
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->ops.poll_cq = f_poll_cq;
	c->ops.req_notify_cq = f_req_notify_cq;
	c->ops.post_send = f_post_send;
	c->ops.post_recv = f_post_recv;
	c->ops.post_srq_recv = f_post_srq_recv;
	return c;
}

int ibv_close_device(struct ibv_context *c)
{
	TRACE();
	struct fctx *f = fctx_of(c);
	close(f->async_r);
	close(f->async_w);
	free(f);
	return 0;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	TRACE();
	(void)c;
	memset(a, 0, sizeof(*a));
	strcpy(a->fw_ver, "fake-1.0");
	a->node_guid = htobe64(0x0002c9fffe000001ULL);
	a->sys_image_guid = htobe64(0x0002c9fffe000002ULL);
	a->max_mr_size = 1ULL << 32;
	a->vendor_id = 0x1234;
	a->vendor_part_id = 42;
	a->hw_ver = 7;
	a->max_qp = 64;
	a->max_qp_wr = 1024;
	a->max_sge = MAX_SGE;
	a->max_cq = 64;
	a->max_cqe = 4096;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_srq = 16;
	a->max_srq_wr = 1024;
	a->max_srq_sge = MAX_SGE;
	a->max_mw = 0;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	return 0;
}

static void fill_port(struct ibv_port_attr *a)
{
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->gid_tbl_len = 8;
	a->max_msg_sz = 1u << 31;
	a->pkey_tbl_len = 1;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
}

/* The compat symbol: reports active MTU 1024 (the extended one says 2048). */
int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *pa)
{
	TRACE();
	struct ibv_port_attr *a = (struct ibv_port_attr *)pa;
	(void)c;
	if (port != 1)
		return EINVAL;
	fill_port(a);
	a->active_mtu = IBV_MTU_1024;
	return 0;
}

static int f_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len)
{
	(void)c;
	if (port != 1 || len != sizeof(*a))
		return EINVAL;
	memset(a, 0, len);
	fill_port(a);
	a->active_mtu = IBV_MTU_2048;
	return 0;
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	TRACE();
	(void)c;
	if (port != 1 || index < 0 || index >= 8)
		return -1;
	memset(gid, 0, sizeof(*gid));
	if (index < NGIDS)
		memcpy(gid->raw, gid_table[index], 16);
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
	TRACE();
	(void)c; (void)flags;
	if (port != 1 || index >= NGIDS || size != sizeof(*e))
		return ENODATA;
	memcpy(e->gid.raw, gid_table[index], 16);
	e->gid_index = index;
	e->port_num = 1;
	e->gid_type = (index & 1) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
	e->ndev_ifindex = 2;
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
			     size_t max, uint32_t flags, size_t size)
{
	TRACE();
	size_t i;
	if (size != sizeof(*entries) || max < NGIDS)
		return -EINVAL;
	for (i = 0; i < NGIDS; i++)
		_ibv_query_gid_ex(c, 1, i, &entries[i], flags, size);
	return NGIDS;
}

int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *e)
{
	TRACE();
	ssize_t n = read(fctx_of(c)->async_r, e, sizeof(*e));
	if (n != sizeof(*e)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *e) { TRACE(); (void)e; }

/* ------------------------------------------------------------- PD and MR -- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	TRACE();
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	pd->context = c;
	pthread_mutex_lock(&big);
	pd->handle = next_handle++;
	pthread_mutex_unlock(&big);
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	TRACE();
	free(pd);
	return 0;
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
			     unsigned int access)
{
	struct fmr *m;
	if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&big);
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = len;
	m->mr.handle = next_handle++;
	m->mr.lkey = 0x1000 + m->mr.handle;
	m->mr.rkey = 0x2000 + m->mr.handle;
	m->iova = iova;
	m->access = access;
	m->next = mrs;
	mrs = m;
	pthread_mutex_unlock(&big);
	return &m->mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				unsigned int access)
{
	TRACE();
	return reg_mr(pd, addr, len, iova, access);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	TRACE();
	return reg_mr(pd, addr, len, (uintptr_t)addr, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	TRACE();
	struct fmr **p;
	pthread_mutex_lock(&big);
	for (p = &mrs; *p; p = &(*p)->next)
		if (&(*p)->mr == mr) {
			struct fmr *m = *p;
			*p = m->next;
			free(m);
			pthread_mutex_unlock(&big);
			return 0;
		}
	pthread_mutex_unlock(&big);
	return EINVAL;
}

/* The bytes of [addr, addr+len) under key `key`, or NULL. */
static char *mr_ptr(uint32_t key, int remote, uint64_t addr, uint64_t len, int need)
{
	struct fmr *m;
	for (m = mrs; m; m = m->next) {
		if ((remote ? m->mr.rkey : m->mr.lkey) != key)
			continue;
		if ((m->access & need) != need)
			return NULL;
		if (addr < m->iova || addr + len > m->iova + m->mr.length || addr + len < addr)
			return NULL;
		return (char *)m->mr.addr + (addr - m->iova);
	}
	return NULL;
}

/* --------------------------------------------------------- channel and CQ -- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	TRACE();
	struct fchan *f = calloc(1, sizeof(*f));
	int p[2];
	if (!f || pipe2(p, O_CLOEXEC) != 0) {
		free(f);
		return NULL;
	}
	f->ch.context = c;
	f->ch.fd = p[0];
	f->wfd = p[1];
	return &f->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	TRACE();
	struct fchan *f = (struct fchan *)ch;
	close(f->ch.fd);
	close(f->wfd);
	free(f);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
			     struct ibv_comp_channel *ch, int vec)
{
	TRACE();
	struct fcq *f;
	(void)vec;
	if (cqe < 1 || cqe > 4096) {
		errno = EINVAL;
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->cap = cqe;
	f->ring = calloc(cqe, sizeof(struct ibv_wc));
	f->cq.context = c;
	f->cq.channel = ch;
	f->cq.cq_context = cq_context;
	f->cq.cqe = cqe;
	pthread_mutex_lock(&big);
	f->cq.handle = next_handle++;
	pthread_mutex_unlock(&big);
	return &f->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	TRACE();
	struct fcq *f = (struct fcq *)cq;
	free(f->ring);
	free(f);
	return 0;
}

static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc, int solicited)
{
	struct fcq *f = (struct fcq *)cq;
	if (f->count == f->cap) {
		async_event(cq->context, IBV_EVENT_CQ_ERR, cq);
		return;
	}
	f->ring[(f->head + f->count) % f->cap] = *wc;
	f->count++;
	if (f->armed && cq->channel &&
	    (!f->solicited_only || solicited || wc->status != IBV_WC_SUCCESS)) {
		struct fchan *ch = (struct fchan *)cq->channel;
		f->armed = 0;
		if (write(ch->wfd, &cq, sizeof(cq)) != sizeof(cq))
			abort();
	}
}

static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fcq *f = (struct fcq *)cq;
	int i = 0;
	pthread_mutex_lock(&big);
	while (i < n && f->count > 0) {
		wc[i++] = f->ring[f->head];
		f->head = (f->head + 1) % f->cap;
		f->count--;
	}
	pthread_mutex_unlock(&big);
	return i;
}

static int f_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct fcq *f = (struct fcq *)cq;
	pthread_mutex_lock(&big);
	f->armed = 1;
	f->solicited_only = solicited_only;
	pthread_mutex_unlock(&big);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	TRACE();
	ssize_t n = read(ch->fd, cq, sizeof(*cq));
	if (n != sizeof(*cq)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	*cq_context = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { TRACE(); (void)cq; (void)n; }

/* ------------------------------------------------------- receive queues -- */

static int rq_init(struct rq *rq, uint32_t cap)
{
	rq->cap = cap ? cap : 1;
	rq->q = calloc(rq->cap, sizeof(struct rwqe));
	return rq->q ? 0 : ENOMEM;
}

static int rq_post(struct rq *rq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct rwqe *e;
		if (wr->num_sge > MAX_SGE || wr->num_sge < 0) {
			*bad = wr;
			return EINVAL;
		}
		if (rq->count == rq->cap) {
			*bad = wr;
			return ENOMEM;
		}
		e = &rq->q[(rq->head + rq->count) % rq->cap];
		e->wr_id = wr->wr_id;
		e->num_sge = wr->num_sge;
		memcpy(e->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
		rq->count++;
	}
	return 0;
}

static int rq_pop(struct rq *rq, struct rwqe *out)
{
	if (rq->count == 0)
		return 0;
	*out = rq->q[rq->head];
	rq->head = (rq->head + 1) % rq->cap;
	rq->count--;
	return 1;
}

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fqp *f = (struct fqp *)qp;
	int rc;
	pthread_mutex_lock(&big);
	if (qp->srq || f->attr.qp_state == IBV_QPS_RESET) {
		*bad = wr;
		pthread_mutex_unlock(&big);
		return EINVAL;
	}
	rc = rq_post(&f->rq, wr, bad);
	pthread_mutex_unlock(&big);
	return rc;
}

static int f_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int rc;
	pthread_mutex_lock(&big);
	rc = rq_post(&((struct fsrq *)srq)->rq, wr, bad);
	pthread_mutex_unlock(&big);
	return rc;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	TRACE();
	struct fsrq *f = calloc(1, sizeof(*f));
	if (!f || rq_init(&f->rq, a->attr.max_wr) != 0) {
		free(f);
		errno = ENOMEM;
		return NULL;
	}
	f->srq.context = pd->context;
	f->srq.srq_context = a->srq_context;
	f->srq.pd = pd;
	pthread_mutex_lock(&big);
	f->srq.handle = next_handle++;
	pthread_mutex_unlock(&big);
	return &f->srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *a, int mask)
{
	TRACE();
	struct fsrq *f = (struct fsrq *)srq;
	if (mask & ~IBV_SRQ_LIMIT)
		return EINVAL;
	pthread_mutex_lock(&big);
	f->limit = a->srq_limit;
	pthread_mutex_unlock(&big);
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	TRACE();
	struct fsrq *f = (struct fsrq *)srq;
	free(f->rq.q);
	free(f);
	return 0;
}

/* -------------------------------------------------------------------- AH -- */

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	TRACE();
	struct fah *f;
	if (!attr->is_global || !gid_is_v2(attr->grh.sgid_index) || attr->port_num != 1) {
		errno = EINVAL;
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->ah.context = pd->context;
	f->ah.pd = pd;
	f->attr = *attr;
	pthread_mutex_lock(&big);
	f->ah.handle = next_handle++;
	pthread_mutex_unlock(&big);
	return &f->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	TRACE();
	free(ah);
	return 0;
}

/* -------------------------------------------------------------------- QP -- */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	TRACE();
	struct fqp *f;
	if (!a->send_cq || !a->recv_cq || a->cap.max_send_sge > MAX_SGE ||
	    a->cap.max_recv_sge > MAX_SGE || a->cap.max_send_wr > 1024 ||
	    (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD)) {
		errno = EINVAL;
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f || (!a->srq && rq_init(&f->rq, a->cap.max_recv_wr) != 0)) {
		free(f);
		errno = ENOMEM;
		return NULL;
	}
	if (a->cap.max_inline_data > 128)
		a->cap.max_inline_data = 128;
	f->cap = a->cap;
	f->sq_sig_all = a->sq_sig_all;
	f->qp.context = pd->context;
	f->qp.qp_context = a->qp_context;
	f->qp.pd = pd;
	f->qp.send_cq = a->send_cq;
	f->qp.recv_cq = a->recv_cq;
	f->qp.srq = a->srq;
	f->qp.state = IBV_QPS_RESET;
	f->qp.qp_type = a->qp_type;
	f->attr.qp_state = IBV_QPS_RESET;
	f->attr.cap = a->cap;
	pthread_mutex_lock(&big);
	f->qp.handle = next_handle++;
	f->qp.qp_num = next_qpn++;
	f->next = qps;
	qps = f;
	pthread_mutex_unlock(&big);
	return &f->qp;
}

static struct fqp *qp_by_num(uint32_t n)
{
	struct fqp *q;
	for (q = qps; q; q = q->next)
		if (q->qp.qp_num == n)
			return q;
	return NULL;
}

static void flush(struct fqp *f)
{
	struct rwqe e;
	if (f->qp.srq)
		return;
	while (rq_pop(&f->rq, &e)) {
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = e.wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.opcode = IBV_WC_RECV;
		wc.qp_num = f->qp.qp_num;
		cq_push(f->qp.recv_cq, &wc, 0);
	}
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	TRACE();
	struct fqp *f = (struct fqp *)qp;
	pthread_mutex_lock(&big);
	if (mask & IBV_QP_AV) {
		if (!a->ah_attr.is_global || !gid_is_v2(a->ah_attr.grh.sgid_index) ||
		    a->ah_attr.port_num != 1) {
			pthread_mutex_unlock(&big);
			return EINVAL;
		}
		f->attr.ah_attr = a->ah_attr;
	}
	if ((mask & IBV_QP_PORT) && a->port_num != 1) {
		pthread_mutex_unlock(&big);
		return EINVAL;
	}
	if (mask & IBV_QP_STATE && a->qp_state == IBV_QPS_RTR && qp->qp_type != IBV_QPT_UD &&
	    !((mask & IBV_QP_AV) && (mask & IBV_QP_DEST_QPN) && (mask & IBV_QP_RQ_PSN) &&
	      (mask & IBV_QP_PATH_MTU))) {
		pthread_mutex_unlock(&big);
		return EINVAL;
	}
#define SET(bit, field) if (mask & (bit)) f->attr.field = a->field
	SET(IBV_QP_ACCESS_FLAGS, qp_access_flags);
	SET(IBV_QP_PKEY_INDEX, pkey_index);
	SET(IBV_QP_PORT, port_num);
	SET(IBV_QP_QKEY, qkey);
	SET(IBV_QP_PATH_MTU, path_mtu);
	SET(IBV_QP_TIMEOUT, timeout);
	SET(IBV_QP_RETRY_CNT, retry_cnt);
	SET(IBV_QP_RNR_RETRY, rnr_retry);
	SET(IBV_QP_RQ_PSN, rq_psn);
	SET(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
	SET(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
	SET(IBV_QP_SQ_PSN, sq_psn);
	SET(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
	SET(IBV_QP_DEST_QPN, dest_qp_num);
#undef SET
	if (mask & IBV_QP_STATE) {
		f->attr.qp_state = a->qp_state;
		qp->state = a->qp_state;
		if (a->qp_state == IBV_QPS_ERR)
			flush(f);
	}
	pthread_mutex_unlock(&big);
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	TRACE();
	struct fqp *f = (struct fqp *)qp;
	(void)mask;
	pthread_mutex_lock(&big);
	*a = f->attr;
	a->cur_qp_state = f->attr.qp_state;
	a->cap = f->cap;
	memset(init, 0, sizeof(*init));
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	init->cap = f->cap;
	init->qp_type = qp->qp_type;
	init->sq_sig_all = f->sq_sig_all;
	pthread_mutex_unlock(&big);
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	TRACE();
	struct fqp **p;
	pthread_mutex_lock(&big);
	for (p = &qps; *p; p = &(*p)->next)
		if (&(*p)->qp == qp) {
			struct fqp *f = *p;
			*p = f->next;
			free(f->rq.q);
			free(f);
			break;
		}
	pthread_mutex_unlock(&big);
	return 0;
}

/* -------------------------------------------------------------- execution -- */

/* Gathers a send WR's data into buf (at most cap bytes); returns the length
 * or -1 for a local protection error. */
static long gather(struct ibv_send_wr *wr, char *buf, size_t cap)
{
	size_t n = 0;
	int i;
	for (i = 0; i < wr->num_sge; i++) {
		struct ibv_sge *s = &wr->sg_list[i];
		const char *src = (wr->send_flags & IBV_SEND_INLINE)
			? (const char *)(uintptr_t)s->addr
			: mr_ptr(s->lkey, 0, s->addr, s->length, 0);
		if (!src || n + s->length > cap)
			return -1;
		memcpy(buf + n, src, s->length);
		n += s->length;
	}
	return (long)n;
}

/* Scatters len bytes into a receive WQE's list (skipping `skip` bytes of
 * it first); returns 0, or -1 if they do not fit. */
static int scatter(struct rwqe *e, size_t skip, const char *data, size_t len)
{
	int i;
	for (i = 0; i < e->num_sge && len > 0; i++) {
		struct ibv_sge *s = &e->sge[i];
		size_t room = s->length, off = 0, k;
		char *dst;
		if (skip >= room) {
			skip -= room;
			continue;
		}
		off = skip;
		skip = 0;
		k = room - off < len ? room - off : len;
		dst = mr_ptr(s->lkey, 0, s->addr + off, k, IBV_ACCESS_LOCAL_WRITE);
		if (!dst)
			return -1;
		memcpy(dst, data, k);
		data += k;
		len -= k;
	}
	return len == 0 ? 0 : -1;
}

static char big_buf[1 << 22];

static int execute(struct fqp *src, struct ibv_send_wr *wr, struct ibv_wc *swc)
{
	struct fqp *dst;
	uint32_t dqpn = src->qp.qp_type == IBV_QPT_UD ? wr->wr.ud.remote_qpn : src->attr.dest_qp_num;
	long len;
	struct rwqe e;
	struct ibv_wc rwc;
	int has_recv = 0, grh = src->qp.qp_type == IBV_QPT_UD;

	swc->byte_len = 0;
	dst = qp_by_num(dqpn);
	if (!dst || dst->attr.qp_state < IBV_QPS_RTR || dst->attr.qp_state > IBV_QPS_SQD)
		return IBV_WC_RETRY_EXC_ERR;
	memset(&rwc, 0, sizeof(rwc));
	rwc.qp_num = dst->qp.qp_num;
	rwc.src_qp = src->qp.qp_num;
	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			len = gather(wr, big_buf, sizeof(big_buf));
			if (len < 0)
				return IBV_WC_LOC_PROT_ERR;
			char *d = mr_ptr(wr->wr.rdma.rkey, 1, wr->wr.rdma.remote_addr, len,
					 IBV_ACCESS_REMOTE_WRITE);
			if (!d)
				return IBV_WC_REM_ACCESS_ERR;
			memcpy(d, big_buf, len);
			rwc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		} else {
			len = gather(wr, big_buf, sizeof(big_buf));
			if (len < 0)
				return IBV_WC_LOC_PROT_ERR;
			rwc.opcode = IBV_WC_RECV;
		}
		if (dst->qp.srq) {
			struct fsrq *s = (struct fsrq *)dst->qp.srq;
			has_recv = rq_pop(&s->rq, &e);
			if (has_recv && s->limit && (uint32_t)s->rq.count < s->limit) {
				s->limit = 0;
				async_event(dst->qp.context, IBV_EVENT_SRQ_LIMIT_REACHED, dst->qp.srq);
			}
		} else {
			has_recv = rq_pop(&dst->rq, &e);
		}
		if (!has_recv)
			return IBV_WC_RNR_RETRY_EXC_ERR;
		rwc.wr_id = e.wr_id;
		if (rwc.opcode == IBV_WC_RECV) {
			if (grh) {
				char zero[40] = { 0 };
				if (scatter(&e, 0, zero, 40) != 0)
					return IBV_WC_REM_OP_ERR;
				rwc.wc_flags |= IBV_WC_GRH;
			}
			if (scatter(&e, grh ? 40 : 0, big_buf, len) != 0) {
				rwc.status = IBV_WC_LOC_LEN_ERR;
				cq_push(dst->qp.recv_cq, &rwc, 0);
				return IBV_WC_REM_INV_REQ_ERR;
			}
			rwc.byte_len = len + (grh ? 40 : 0);
		} else {
			rwc.byte_len = len;
		}
		if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			rwc.wc_flags |= IBV_WC_WITH_IMM;
			rwc.imm_data = wr->imm_data;
		}
		if (wr->opcode == IBV_WR_SEND_WITH_INV) {
			rwc.wc_flags |= IBV_WC_WITH_INV;
			rwc.invalidated_rkey = wr->invalidate_rkey;
		}
		rwc.status = IBV_WC_SUCCESS;
		cq_push(dst->qp.recv_cq, &rwc, !!(wr->send_flags & IBV_SEND_SOLICITED));
		swc->opcode = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
		swc->byte_len = len;
		return IBV_WC_SUCCESS;
	case IBV_WR_RDMA_WRITE: {
		char *d;
		len = gather(wr, big_buf, sizeof(big_buf));
		if (len < 0)
			return IBV_WC_LOC_PROT_ERR;
		d = mr_ptr(wr->wr.rdma.rkey, 1, wr->wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_WRITE);
		if (!d)
			return IBV_WC_REM_ACCESS_ERR;
		memcpy(d, big_buf, len);
		swc->opcode = IBV_WC_RDMA_WRITE;
		swc->byte_len = len;
		return IBV_WC_SUCCESS;
	}
	case IBV_WR_RDMA_READ: {
		size_t total = 0;
		int i;
		char *s;
		for (i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		s = mr_ptr(wr->wr.rdma.rkey, 1, wr->wr.rdma.remote_addr, total, IBV_ACCESS_REMOTE_READ);
		if (!s)
			return IBV_WC_REM_ACCESS_ERR;
		for (i = 0; i < wr->num_sge; i++) {
			struct ibv_sge *g = &wr->sg_list[i];
			char *d = mr_ptr(g->lkey, 0, g->addr, g->length, IBV_ACCESS_LOCAL_WRITE);
			if (!d)
				return IBV_WC_LOC_PROT_ERR;
			memcpy(d, s, g->length);
			s += g->length;
		}
		swc->opcode = IBV_WC_RDMA_READ;
		swc->byte_len = total;
		return IBV_WC_SUCCESS;
	}
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: {
		uint64_t *t, old;
		char *d;
		if (wr->num_sge != 1 || wr->sg_list[0].length != 8 || (wr->wr.atomic.remote_addr & 7))
			return IBV_WC_REM_INV_REQ_ERR;
		t = (uint64_t *)mr_ptr(wr->wr.atomic.rkey, 1, wr->wr.atomic.remote_addr, 8,
				       IBV_ACCESS_REMOTE_ATOMIC);
		if (!t)
			return IBV_WC_REM_ACCESS_ERR;
		d = mr_ptr(wr->sg_list[0].lkey, 0, wr->sg_list[0].addr, 8, IBV_ACCESS_LOCAL_WRITE);
		if (!d)
			return IBV_WC_LOC_PROT_ERR;
		old = *t;
		if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			if (old == wr->wr.atomic.compare_add)
				*t = wr->wr.atomic.swap;
			swc->opcode = IBV_WC_COMP_SWAP;
		} else {
			*t = old + wr->wr.atomic.compare_add;
			swc->opcode = IBV_WC_FETCH_ADD;
		}
		memcpy(d, &old, 8);
		swc->byte_len = 8;
		return IBV_WC_SUCCESS;
	}
	default:
		return IBV_WC_LOC_QP_OP_ERR;
	}
}

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fqp *f = (struct fqp *)qp;
	pthread_mutex_lock(&big);
	for (; wr; wr = wr->next) {
		struct ibv_wc wc;
		int status;
		if (f->attr.qp_state != IBV_QPS_RTS || wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > f->cap.max_send_sge ||
		    (qp->qp_type == IBV_QPT_UD && !wr->wr.ud.ah) ||
		    (qp->qp_type != IBV_QPT_RC && (wr->opcode == IBV_WR_RDMA_READ ||
						  wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
						  wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD))) {
			*bad = wr;
			pthread_mutex_unlock(&big);
			return EINVAL;
		}
		memset(&wc, 0, sizeof(wc));
		status = execute(f, wr, &wc);
		wc.wr_id = wr->wr_id;
		wc.status = status;
		wc.qp_num = qp->qp_num;
		if (status != IBV_WC_SUCCESS || f->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED))
			cq_push(qp->send_cq, &wc, 0);
		if (status != IBV_WC_SUCCESS && qp->qp_type == IBV_QPT_RC) {
			f->attr.qp_state = IBV_QPS_ERR;
			qp->state = IBV_QPS_ERR;
			async_event(qp->context, IBV_EVENT_QP_FATAL, qp);
		}
	}
	pthread_mutex_unlock(&big);
	return 0;
}
