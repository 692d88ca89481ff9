/*
 * verbs_diff: the same libibverbs calls on two stacks, one canonical line
 * per case, so that a diff of two runs shows every difference in behaviour.
 *
 * Compiled against Debian's <infiniband/verbs.h> (rdma-core 44). It runs
 * over rxe-rs's drop-in libibverbs.so.1 (`rxe exec`) on the host and over
 * the real libibverbs on the kernel's rdma_rxe in the interop guest
 * (tests/interop/verbs_diff.sh compares the two outputs, with the
 * differences that docs/divergences.md lists and argues taken out).
 *
 * Usage: verbs_diff DEVICE table
 *        verbs_diff DEVICE random SEED STEPS
 *
 * Every line is "CASE-ID: RESULT". A case id names the call and its
 * arguments (symbolically: "max" is the device's limit, so that a
 * difference in a limit shows once, in its own dev.* case, and not in
 * every case that uses it). A result never holds a value that differs
 * from run to run on the same stack: no key, QP number, handle or address,
 * only what follows from them (for example "rkey=0" or "rkey=lkey").
 * Results: "ok [details]", "err ENAME" (an int-returning verb that
 * failed, with the errno it returned or set), "null ENAME" (a constructor
 * that returned NULL), and for work requests the completion
 * "wc STATUS op=OPCODE len=N flags=F [data=...]".
 *
 * The connected cases use two QPs on the one device, connected to each
 * other through its RoCE v2 IPv4 GID (kernel rxe loops such packets back
 * inside the kernel; rxe-rs sends them to its own address).
 *
 * The random mode draws a sequence of calls from SEED (the same sequence
 * on both stacks: each step draws its numbers before it looks at what
 * earlier steps created) and prints one line per step. A watchdog ends a
 * run that hangs in a verb (exit 3, "HANG" printed).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "diff_lines.h"

static const char *opname(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_BIND_MW: return "BIND_MW";
	case IBV_WC_LOCAL_INV: return "LOCAL_INV";
	case IBV_WC_ATOMIC_WRITE: return "ATOMIC_WRITE";
	case IBV_WC_TSO: return "TSO";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: {
		static char b[16];
		snprintf(b, sizeof b, "op%d", op);
		return b;
	}
	}
}

/* ---- the device ---------------------------------------------------------- */

static struct ibv_context *ctx;
static struct ibv_device_attr dattr;
static struct ibv_port_attr pattr;
static int gidx = -1;
static union ibv_gid gid;

/* The RoCE v2 GID holding an IPv4 address: the one both stacks use. */
static void find_gid(void)
{
	for (int i = 0; i < pattr.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(ctx, 1, i, &e, 0))
			continue;
		const uint8_t *r = e.gid.raw;
		static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(r, v4, 12)) {
			gidx = i;
			gid = e.gid;
			return;
		}
	}
}

/* ---- the library's own calls and the device's answers --------------------- */

static void cases_device(struct ibv_device *dev)
{
	struct ibv_device_attr_ex ax;
	struct ibv_port_attr pa;
	union ibv_gid g;
	uint16_t pkey;
	int rc;

	line("lib.get_device_name", "%s", ibv_get_device_name(dev) ? "ok" : "null");
	line("lib.get_device_guid", "%s", ibv_get_device_guid(dev) ? "nonzero" : "zero");
	line("lib.node_type", "%s", ibv_node_type_str(dev->node_type));
	line("lib.transport_type", "%d", dev->transport_type);
	line("lib.wc_status_str.LOC_LEN_ERR", "%s", ibv_wc_status_str(IBV_WC_LOC_LEN_ERR));
	line("lib.port_state_str.ACTIVE", "%s", ibv_port_state_str(IBV_PORT_ACTIVE));
	line("lib.event_type_str.QP_FATAL", "%s", ibv_event_type_str(IBV_EVENT_QP_FATAL));
	line("lib.rate_to_mult.100G", "%d", ibv_rate_to_mult(IBV_RATE_100_GBPS));
	line("lib.rate_to_mbps.25G", "%d", ibv_rate_to_mbps(IBV_RATE_25_GBPS));

#define DA(f) line("dev.attr." #f, "%llu", (unsigned long long)dattr.f)
	DA(max_mr_size); DA(page_size_cap); DA(hw_ver);
	DA(max_qp); DA(max_qp_wr); DA(device_cap_flags); DA(max_sge); DA(max_sge_rd);
	DA(max_cq); DA(max_cqe); DA(max_mr); DA(max_pd); DA(max_qp_rd_atom);
	DA(max_ee_rd_atom); DA(max_res_rd_atom); DA(max_qp_init_rd_atom);
	DA(max_ee_init_rd_atom); DA(atomic_cap); DA(max_ee); DA(max_rdd); DA(max_mw);
	DA(max_raw_ipv6_qp); DA(max_raw_ethy_qp); DA(max_mcast_grp); DA(max_mcast_qp_attach);
	DA(max_total_mcast_qp_attach); DA(max_ah); DA(max_fmr); DA(max_map_per_fmr);
	DA(max_srq); DA(max_srq_wr); DA(max_srq_sge); DA(max_pkeys); DA(local_ca_ack_delay);
	DA(phys_port_cnt);
#undef DA
	line("dev.attr.fw_ver", "%s", dattr.fw_ver[0] ? "set" : "empty");
	line("dev.attr.node_guid", "%s", dattr.node_guid ? "nonzero" : "zero");
	line("dev.attr.node_guid_is_device_guid", "%d",
	     dattr.node_guid == ibv_get_device_guid(dev));
	line("dev.attr.sys_image_guid", "%s", dattr.sys_image_guid ? "nonzero" : "zero");

	memset(&ax, 0, sizeof ax);
	rc = ibv_query_device_ex(ctx, NULL, &ax);
	rc_line("dev.query_device_ex", rc);
	if (!rc) {
#define DX(f) line("dev.attr_ex." #f, "%llu", (unsigned long long)ax.f)
		DX(odp_caps.general_caps); DX(odp_caps.per_transport_caps.rc_odp_caps);
		DX(odp_caps.per_transport_caps.uc_odp_caps);
		DX(odp_caps.per_transport_caps.ud_odp_caps);
		DX(completion_timestamp_mask); DX(hca_core_clock); DX(device_cap_flags_ex);
		DX(tso_caps.max_tso); DX(rss_caps.max_rwq_indirection_tables);
		DX(max_wq_type_rq); DX(packet_pacing_caps.qp_rate_limit_max);
		DX(raw_packet_caps); DX(tm_caps.max_num_tags); DX(cq_mod_caps.max_cq_count);
		DX(max_dm_size); DX(pci_atomic_caps.fetch_add); DX(pci_atomic_caps.compare_swap);
		DX(xrc_odp_caps); DX(phys_port_cnt_ex);
#undef DX
	}

	rc = ibv_query_port(ctx, 1, &pa);
	rc_line("port.query.1", rc);
#define PA(f) line("port.attr." #f, "%llu", (unsigned long long)pattr.f)
	PA(state); PA(max_mtu); PA(active_mtu); PA(gid_tbl_len); PA(port_cap_flags);
	PA(max_msg_sz); PA(bad_pkey_cntr); PA(qkey_viol_cntr); PA(pkey_tbl_len); PA(lid);
	PA(sm_lid); PA(lmc); PA(max_vl_num); PA(sm_sl); PA(subnet_timeout);
	PA(init_type_reply); PA(active_width); PA(active_speed); PA(phys_state);
	PA(link_layer); PA(flags); PA(port_cap_flags2);
#undef PA
	rc_line("port.query.0", ibv_query_port(ctx, 0, &pa));
	rc_line("port.query.2", ibv_query_port(ctx, 2, &pa));

	line("gid.roce_v2_ipv4", "%s", gidx >= 0 ? "found" : "none");
	rc_line("gid.query.max", ibv_query_gid(ctx, 1, pattr.gid_tbl_len, &g));
	rc_line("gid.query.-1", ibv_query_gid(ctx, 1, -1, &g));
	rc_line("gid.query.port0", ibv_query_gid(ctx, 0, 0, &g));
	rc_line("gid.query.port2", ibv_query_gid(ctx, 2, 0, &g));
	{
		struct ibv_gid_entry e;
		rc_line("gid.query_ex.max", ibv_query_gid_ex(ctx, 1, pattr.gid_tbl_len, &e, 0));
		rc_line("gid.query_ex.flags1", ibv_query_gid_ex(ctx, 1, gidx, &e, 1));
		if (!ibv_query_gid_ex(ctx, 1, gidx, &e, 0))
			line("gid.query_ex.v4", "type=%u port=%u index=%d ndev=%s", e.gid_type,
			     e.port_num, e.gid_index == (uint32_t)gidx, e.ndev_ifindex ? "set" : "0");
		/* the table against the per-index query, entry by entry */
		struct ibv_gid_entry tab[64];
		ssize_t n = ibv_query_gid_table(ctx, tab, 64, 0);
		int same = 1, v2 = 0;
		for (ssize_t i = 0; i < n; i++) {
			struct ibv_gid_entry one;
			if (ibv_query_gid_ex(ctx, tab[i].port_num, tab[i].gid_index, &one, 0) ||
			    memcmp(&one.gid, &tab[i].gid, 16) || one.gid_type != tab[i].gid_type)
				same = 0;
			v2 += tab[i].gid_type == IBV_GID_TYPE_ROCE_V2;
		}
		line("gid.query_table", "%s matches_query_ex=%d roce_v2_v4=%d",
		     n > 0 ? "ok" : ename(errno), same, v2 > 0);
		rc_line("gid.query_table.flags1", (int)ibv_query_gid_table(ctx, tab, 64, 1));
		n = ibv_query_gid_table(ctx, tab, 0, 0);
		line("gid.query_table.size0", "%s", n < 0 ? ename(-n > 0 ? (int)-n : errno) : "ok");
	}
	rc = ibv_query_pkey(ctx, 1, 0, &pkey);
	if (rc)
		rc_line("pkey.query.0", rc);
	else
		line("pkey.query.0", "ok 0x%x", ntohs(pkey));
	rc_line("pkey.query.max", ibv_query_pkey(ctx, 1, pattr.pkey_tbl_len, &pkey));
	line("pkey.get_index.ffff", "%d", ibv_get_pkey_index(ctx, 1, htons(0xffff)));
	line("pkey.get_index.1234", "%d", ibv_get_pkey_index(ctx, 1, htons(0x1234)));
}

/* ---- protection domains and memory regions -------------------------------- */

static const int access_bits[] = {
	IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
	IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED,
};
static const char *access_names[] = { "LW", "RW", "RR", "RA", "MWB", "ZB" };

static const char *access_str(int a)
{
	static char b[64];
	b[0] = 0;
	for (unsigned i = 0; i < sizeof access_bits / sizeof access_bits[0]; i++)
		if (a & access_bits[i]) {
			strcat(b, b[0] ? "|" : "");
			strcat(b, access_names[i]);
		}
	if (a & ~0x3f) {
		char x[24];
		snprintf(x, sizeof x, "%s0x%x", b[0] ? "|" : "", a & ~0x3f);
		strcat(b, x);
	}
	return b[0] ? b : "none";
}

static void mr_line(const char *id, struct ibv_mr *mr)
{
	if (!mr) {
		null_line(id);
		return;
	}
	line(id, "ok rkey=%s length=%zu", mr->rkey == 0 ? "0" : mr->rkey == mr->lkey ? "lkey" : "other",
	     mr->length);
}

static void cases_mr(struct ibv_pd *pd)
{
	static char buf[8192] __attribute__((aligned(4096)));
	struct ibv_mr *mr;

	/* every combination of the six classic flags */
	for (int a = 0; a < 64; a++) {
		mr = ibv_reg_mr(pd, buf, 4096, a);
		mr_line(ID("mr.reg.access=%s", access_str(a)), mr);
		if (mr)
			rc_line(ID("mr.dereg.access=%s", access_str(a)), ibv_dereg_mr(mr));
	}
	static const struct {
		const char *name;
		int bit;
	} more[] = {
		{ "ON_DEMAND", IBV_ACCESS_ON_DEMAND }, { "HUGETLB", IBV_ACCESS_HUGETLB },
		{ "RELAXED_ORDERING", IBV_ACCESS_RELAXED_ORDERING },
		{ "FLUSH_GLOBAL", 1 << 8 }, /* IB_UVERBS_ACCESS_FLUSH_*: not in rdma-core 44 */
		{ "FLUSH_PERSISTENT", 1 << 9 },
		{ "bit15", 1 << 15 }, { "bit30", 1 << 30 },
	};
	for (unsigned i = 0; i < sizeof more / sizeof more[0]; i++) {
		mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | more[i].bit);
		mr_line(ID("mr.reg.access=LW|%s", more[i].name), mr);
		if (mr)
			ibv_dereg_mr(mr);
	}
	static const size_t lens[] = { 0, 1, 4095, 4096, 8192 };
	for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		mr = ibv_reg_mr(pd, buf, lens[i], IBV_ACCESS_LOCAL_WRITE);
		mr_line(ID("mr.reg.len=%zu", lens[i]), mr);
		if (mr)
			ibv_dereg_mr(mr);
	}
	mr = ibv_reg_mr(pd, buf + 1, 100, IBV_ACCESS_LOCAL_WRITE);
	mr_line("mr.reg.unaligned", mr);
	if (mr)
		ibv_dereg_mr(mr);
	mr = ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr_line("mr.reg.null_addr", mr);
	if (mr)
		ibv_dereg_mr(mr);
	/* memory that is not mapped */
	void *hole = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 8192);
	mr = ibv_reg_mr(pd, hole, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr_line("mr.reg.unmapped", mr);
	if (mr)
		ibv_dereg_mr(mr);
	/* read-only memory, with and without local write */
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mr = ibv_reg_mr(pd, ro, 4096, 0);
	mr_line("mr.reg.readonly_mem.access=none", mr);
	if (mr)
		ibv_dereg_mr(mr);
	mr = ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr_line("mr.reg.readonly_mem.access=LW", mr);
	if (mr)
		ibv_dereg_mr(mr);
	munmap(ro, 4096);

	mr = ibv_reg_mr_iova(pd, buf, 4096, 0x10000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	mr_line("mr.reg_iova", mr);
	if (mr) {
		line("mr.reg_iova.addr", "%s", mr->addr == buf ? "buf" : "other");
		ibv_dereg_mr(mr);
	}

	/* ibv_rereg_mr in every mode */
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	static const int modes[] = { 0, 1, 2, 4, 1 | 2, 1 | 4, 2 | 4, 7, 8, 16 };
	for (unsigned i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
		if (!mr)
			continue;
		uint32_t lkey = mr->lkey;
		int f = modes[i];
		int rc = ibv_rereg_mr(mr, f, (f & IBV_REREG_MR_CHANGE_PD) ? pd2 : NULL,
				      (f & IBV_REREG_MR_CHANGE_TRANSLATION) ? buf + 4096 : NULL,
				      (f & IBV_REREG_MR_CHANGE_TRANSLATION) ? 4096 : 0,
				      (f & IBV_REREG_MR_CHANGE_ACCESS) ?
					      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0);
		line(ID("mr.rereg.flags=%d", f), "rc=%d%s%s lkey=%s rkey=%s pd=%s addr=%s", rc,
		     rc ? " errno=" : "", rc ? ename(errno) : "", mr->lkey == lkey ? "same" : "new",
		     mr->rkey == 0 ? "0" : mr->rkey == mr->lkey ? "lkey" : "other",
		     mr->pd == pd2 ? "pd2" : mr->pd == pd ? "pd" : "other",
		     mr->addr == buf ? "buf" : mr->addr == buf + 4096 ? "buf+4096" : "other");
		rc_line(ID("mr.rereg.flags=%d.dereg", f), ibv_dereg_mr(mr));
	}
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (mr) {
		int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_REMOTE_WRITE);
		line("mr.rereg.access=RW_without_LW", "rc=%d errno=%s", rc, rc ? ename(errno) : "0");
		rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 4096, 0);
		line("mr.rereg.translation_null_addr", "rc=%d errno=%s", rc, rc ? ename(errno) : "0");
		ibv_dereg_mr(mr);
	}

	/* a PD with a region on it */
	struct ibv_pd *busy = ibv_alloc_pd(ctx);
	mr = ibv_reg_mr(busy, buf, 4096, 0);
	rc_line("pd.dealloc.with_mr", ibv_dealloc_pd(busy));
	if (mr) {
		ibv_dereg_mr(mr);
		rc_line("pd.dealloc.after_dereg", ibv_dealloc_pd(busy));
	}
	ibv_dealloc_pd(pd2);
}

/* ---- completion queues ---------------------------------------------------- */

static void cq_line(const char *id, struct ibv_cq *cq)
{
	if (!cq) {
		null_line(id);
		return;
	}
	line(id, "ok cqe=%d", cq->cqe);
	ibv_destroy_cq(cq);
}

static void cases_cq(void)
{
	int m = dattr.max_cqe;
	const struct {
		const char *n;
		int v;
	} sizes[] = { { "-1", -1 }, { "0", 0 }, { "1", 1 }, { "2", 2 }, { "3", 3 }, { "100", 100 },
		      { "max-1", m - 1 }, { "max", m }, { "max+1", m + 1 } };
	for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		cq_line(ID("cq.create.cqe=%s", sizes[i].n), ibv_create_cq(ctx, sizes[i].v, NULL, NULL, 0));
	cq_line("cq.create.vector=max", ibv_create_cq(ctx, 8, NULL, NULL, ctx->num_comp_vectors));
	cq_line("cq.create.vector=-1", ibv_create_cq(ctx, 8, NULL, NULL, -1));
	line("cq.num_comp_vectors", "%d", ctx->num_comp_vectors);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	line("cq.channel.create", "%s", ch ? "ok" : ename(errno));
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	rc_line("cq.channel.destroy_busy", ibv_destroy_comp_channel(ch));
	rc_line("cq.req_notify.0", ibv_req_notify_cq(cq, 0));
	rc_line("cq.req_notify.1", ibv_req_notify_cq(cq, 1));
	ibv_destroy_cq(cq);
	rc_line("cq.channel.destroy", ibv_destroy_comp_channel(ch));

	/* resizing an empty CQ */
	for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		if (!cq)
			continue;
		int rc = ibv_resize_cq(cq, sizes[i].v);
		if (rc)
			line(ID("cq.resize.16_to_%s", sizes[i].n), "err %s cqe=%d", ename(rc), cq->cqe);
		else
			line(ID("cq.resize.16_to_%s", sizes[i].n), "ok cqe=%d", cq->cqe);
		ibv_destroy_cq(cq);
	}
	struct ibv_cq_init_attr_ex cx = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
	line("cq.create_ex.standard", "%s", cqx ? "ok" : ename(errno));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	cqx = ibv_create_cq_ex(ctx, &cx);
	line("cq.create_ex.timestamp", "%s", cqx ? "ok" : ename(errno));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	cx.wc_flags = IBV_WC_STANDARD_FLAGS;
	cx.comp_mask = 1u << 5;
	cqx = ibv_create_cq_ex(ctx, &cx);
	line("cq.create_ex.bad_comp_mask", "%s", cqx ? "ok" : ename(errno));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
}

/* ---- queue pairs: creation ------------------------------------------------ */

static struct ibv_cq *scq, *rcq;

static const char *qpt_name(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? "rc" : t == IBV_QPT_UC ? "uc" : t == IBV_QPT_UD ? "ud" : "other";
}

static void qp_line(const char *id, struct ibv_qp *qp, const struct ibv_qp_init_attr *ia)
{
	if (!qp) {
		null_line(id);
		return;
	}
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr qi;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CAP, &qi);
	line(id, "ok cap=%u,%u,%u,%u,%u query=%s state=%d qcap=%u,%u,%u,%u,%u", ia->cap.max_send_wr,
	     ia->cap.max_recv_wr, ia->cap.max_send_sge, ia->cap.max_recv_sge,
	     ia->cap.max_inline_data, rc ? ename(rc) : "ok", rc ? -1 : (int)a.qp_state,
	     qi.cap.max_send_wr, qi.cap.max_recv_wr, qi.cap.max_send_sge, qi.cap.max_recv_sge,
	     qi.cap.max_inline_data);
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, enum ibv_qp_type t, struct ibv_srq *srq,
			      struct ibv_qp_cap cap, int sig_all)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq, .cap = cap, .qp_type = t,
		.sq_sig_all = sig_all,
	};
	return ibv_create_qp(pd, &ia);
}

/* Creates a QP of type t with capacities c (on srq, if any), prints its
 * line as id, and destroys it. */
static void create_case(struct ibv_pd *pd, enum ibv_qp_type t, struct ibv_srq *srq,
			struct ibv_qp_cap c, const char *id)
{
	struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = t, .cap = c };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	qp_line(id, qp, &ia);
	if (qp)
		ibv_destroy_qp(qp);
}

static void cases_qp_create(struct ibv_pd *pd, struct ibv_srq *srq)
{
	const struct ibv_qp_cap base = { 16, 16, 1, 1, 0 };
	int mw = dattr.max_qp_wr, ms = dattr.max_sge;
	const struct {
		const char *n;
		int v;
	} wr[] = { { "0", 0 }, { "1", 1 }, { "2", 2 }, { "3", 3 }, { "100", 100 }, { "max", mw },
		   { "max+1", mw + 1 } },
	  sge[] = { { "0", 0 }, { "1", 1 }, { "2", 2 }, { "3", 3 }, { "max", ms }, { "max+1", ms + 1 } },
	  inl[] = { { "0", 0 }, { "1", 1 }, { "28", 28 }, { "64", 64 }, { "100", 100 }, { "256", 256 },
		    { "512", 512 }, { "1024", 1024 }, { "4096", 4096 } };
	enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

	for (unsigned t = 0; t < 3; t++) {
		const char *tn = qpt_name(types[t]);
		for (int s = 0; s < 2; s++) {
			struct ibv_srq *q = s ? srq : NULL;
			const char *sn = s ? ".srq" : "";
			for (unsigned i = 0; i < sizeof wr / sizeof wr[0]; i++) {
				struct ibv_qp_cap c = base;
				c.max_send_wr = wr[i].v;
				create_case(pd, types[t], q, c, ID("qp.create.%s%s.send_wr=%s", tn, sn, wr[i].n));
				c = base;
				c.max_recv_wr = wr[i].v;
				create_case(pd, types[t], q, c, ID("qp.create.%s%s.recv_wr=%s", tn, sn, wr[i].n));
			}
			for (unsigned i = 0; i < sizeof sge / sizeof sge[0]; i++) {
				struct ibv_qp_cap c = base;
				c.max_send_sge = sge[i].v;
				create_case(pd, types[t], q, c, ID("qp.create.%s%s.send_sge=%s", tn, sn, sge[i].n));
				c = base;
				c.max_recv_sge = sge[i].v;
				create_case(pd, types[t], q, c, ID("qp.create.%s%s.recv_sge=%s", tn, sn, sge[i].n));
			}
			if (s)
				continue;
			for (unsigned i = 0; i < sizeof inl / sizeof inl[0]; i++) {
				struct ibv_qp_cap c = base;
				c.max_inline_data = inl[i].v;
				create_case(pd, types[t], NULL, c, ID("qp.create.%s.inline=%s", tn, inl[i].n));
			}
			create_case(pd, types[t], NULL, (struct ibv_qp_cap){ 0, 0, 0, 0, 0 },
				    ID("qp.create.%s.all_zero", tn));
		}
	}
	/* types the device has no transport for */
	static const struct {
		const char *n;
		int t;
	} bad[] = { { "0", 0 }, { "xrc_send", IBV_QPT_XRC_SEND }, { "raw_packet", IBV_QPT_RAW_PACKET },
		    { "driver", IBV_QPT_DRIVER }, { "77", 77 } };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
		create_case(pd, bad[i].t, NULL, base, ID("qp.create.type=%s", bad[i].n));
	{
		struct ibv_qp *qp = make_qp(pd, IBV_QPT_RC, NULL, base, 1);
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr qi;
		ibv_query_qp(qp, &a, IBV_QP_STATE, &qi);
		line("qp.create.rc.sq_sig_all=1", "query sq_sig_all=%d type=%s srq=%s", qi.sq_sig_all,
		     qpt_name(qi.qp_type), qi.srq ? "set" : "null");
		rc_line("cq.destroy.busy", ibv_destroy_cq(scq));
		rc_line("pd.dealloc.with_qp", ibv_dealloc_pd(pd));
		ibv_destroy_qp(qp);
	}
}

/* ---- queue pairs: the state machine --------------------------------------- */

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr qi;
	return ibv_query_qp(qp, &a, IBV_QP_STATE, &qi) ? -1 : (int)a.qp_state;
}

static void attr_init(struct ibv_qp_attr *a, enum ibv_qp_type t)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_INIT;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	a->qkey = 0x11111111;
	(void)t;
}
static int mask_init(enum ibv_qp_type t)
{
	return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
	       (t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
}

static void attr_rtr(struct ibv_qp_attr *a, uint32_t dest)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = dest;
	a->rq_psn = 0x123;
	a->max_dest_rd_atomic = 4;
	a->min_rnr_timer = 12;
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.dgid = gid;
	a->ah_attr.grh.sgid_index = gidx;
	a->ah_attr.grh.hop_limit = 64;
	a->ah_attr.port_num = 1;
}
static int mask_rtr(enum ibv_qp_type t)
{
	if (t == IBV_QPT_UD)
		return IBV_QP_STATE;
	if (t == IBV_QPT_UC)
		return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

static void attr_rts(struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_RTS;
	a->sq_psn = 0x456;
	a->timeout = 14;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->max_rd_atomic = 4;
}
static int mask_rts(enum ibv_qp_type t)
{
	if (t == IBV_QPT_RC)
		return IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	return IBV_QP_STATE | IBV_QP_SQ_PSN;
}

static const struct {
	const char *n;
	int bit;
} mask_bits[] = {
	{ "STATE", IBV_QP_STATE }, { "CUR_STATE", IBV_QP_CUR_STATE },
	{ "EN_SQD_ASYNC_NOTIFY", IBV_QP_EN_SQD_ASYNC_NOTIFY }, { "ACCESS_FLAGS", IBV_QP_ACCESS_FLAGS },
	{ "PKEY_INDEX", IBV_QP_PKEY_INDEX }, { "PORT", IBV_QP_PORT }, { "QKEY", IBV_QP_QKEY },
	{ "AV", IBV_QP_AV }, { "PATH_MTU", IBV_QP_PATH_MTU }, { "TIMEOUT", IBV_QP_TIMEOUT },
	{ "RETRY_CNT", IBV_QP_RETRY_CNT }, { "RNR_RETRY", IBV_QP_RNR_RETRY },
	{ "RQ_PSN", IBV_QP_RQ_PSN }, { "MAX_QP_RD_ATOMIC", IBV_QP_MAX_QP_RD_ATOMIC },
	{ "ALT_PATH", IBV_QP_ALT_PATH }, { "MIN_RNR_TIMER", IBV_QP_MIN_RNR_TIMER },
	{ "SQ_PSN", IBV_QP_SQ_PSN }, { "MAX_DEST_RD_ATOMIC", IBV_QP_MAX_DEST_RD_ATOMIC },
	{ "PATH_MIG_STATE", IBV_QP_PATH_MIG_STATE }, { "CAP", IBV_QP_CAP },
	{ "DEST_QPN", IBV_QP_DEST_QPN }, { "RATE_LIMIT", IBV_QP_RATE_LIMIT },
};
#define NMASK (sizeof mask_bits / sizeof mask_bits[0])

/* One transition with the attributes and mask given, from a fresh QP
 * brought to `from` (0 RESET, 1 INIT, 2 RTR, 3 RTS): "ok STATE" or
 * "err E STATE" with the state the QP is in afterwards. */
static void transition(struct ibv_pd *pd, enum ibv_qp_type t, int from, struct ibv_qp_attr *a,
		       int mask, const char *id)
{
	const struct ibv_qp_cap cap = { 8, 8, 1, 1, 0 };
	struct ibv_qp *qp = make_qp(pd, t, NULL, cap, 0);
	struct ibv_qp_attr s;
	if (!qp) {
		line(id, "setup failed %s", ename(errno));
		return;
	}
	int ok = 1;
	if (from >= 1) {
		attr_init(&s, t);
		ok = ok && !ibv_modify_qp(qp, &s, mask_init(t));
	}
	if (from >= 2) {
		attr_rtr(&s, qp->qp_num);
		ok = ok && !ibv_modify_qp(qp, &s, mask_rtr(t));
	}
	if (from >= 3) {
		attr_rts(&s);
		ok = ok && !ibv_modify_qp(qp, &s, mask_rts(t));
	}
	if (!ok) {
		line(id, "setup failed");
	} else {
		int rc = ibv_modify_qp(qp, a, mask);
		if (rc)
			line(id, "err %s state=%d", ename(rc), qp_state(qp));
		else
			line(id, "ok state=%d", qp_state(qp));
	}
	ibv_destroy_qp(qp);
}

static void cases_qp_modify(struct ibv_pd *pd)
{
	enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct ibv_qp_attr a;

	for (unsigned ti = 0; ti < 3; ti++) {
		enum ibv_qp_type t = types[ti];
		const char *tn = qpt_name(t);
		/* each step with its required mask, with one required bit
		 * missing, and with each other bit added */
		for (int step = 0; step < 3; step++) {
			int req = step == 0 ? mask_init(t) : step == 1 ? mask_rtr(t) : mask_rts(t);
			const char *sn = step == 0 ? "reset_init" : step == 1 ? "init_rtr" : "rtr_rts";
#define FILL()                                              \
	do {                                                \
		if (step == 0)                              \
			attr_init(&a, t);                   \
		else if (step == 1)                         \
			attr_rtr(&a, 0x12);                 \
		else                                        \
			attr_rts(&a);                       \
		a.cur_qp_state = step == 0 ? IBV_QPS_RESET : step == 1 ? IBV_QPS_INIT : IBV_QPS_RTR; \
		a.cap = (struct ibv_qp_cap){ 8, 8, 1, 1, 0 }; \
		a.path_mtu = IBV_MTU_1024;                  \
		a.timeout = 14;                             \
		a.retry_cnt = 7;                            \
		a.rnr_retry = 7;                            \
		a.max_rd_atomic = 4;                        \
		a.max_dest_rd_atomic = 4;                   \
		a.min_rnr_timer = 12;                       \
		a.qkey = 0x11111111;                        \
		a.port_num = 1;                             \
		a.path_mig_state = IBV_MIG_MIGRATED;        \
		if (step != 1) {                            \
			a.ah_attr.is_global = 1;            \
			a.ah_attr.grh.dgid = gid;           \
			a.ah_attr.grh.sgid_index = gidx;    \
			a.ah_attr.grh.hop_limit = 64;       \
			a.ah_attr.port_num = 1;             \
		}                                           \
	} while (0)
			FILL();
			transition(pd, t, step, &a, req, ID("qp.modify.%s.%s.required", tn, sn));
			for (unsigned b = 0; b < NMASK; b++) {
				int bit = mask_bits[b].bit;
				FILL();
				if (req & bit) {
					if (bit == IBV_QP_STATE)
						continue;
					transition(pd, t, step, &a, req & ~bit,
						   ID("qp.modify.%s.%s.without_%s", tn, sn, mask_bits[b].n));
				} else {
					transition(pd, t, step, &a, req | bit,
						   ID("qp.modify.%s.%s.with_%s", tn, sn, mask_bits[b].n));
				}
			}
		}
		/* every state to every state with the STATE bit alone */
		for (int from = 0; from < 4; from++)
			for (int to = 0; to <= IBV_QPS_ERR; to++) {
				memset(&a, 0, sizeof a);
				a.qp_state = to;
				transition(pd, t, from, &a, IBV_QP_STATE,
					   ID("qp.modify.%s.from%d.to%d.state_only", tn, from, to));
			}
		/* out-of-range values in the steps that take them */
		static const struct {
			const char *n;
			int step;
		} vals[] = {
			{ "pkey_index=1", 0 }, { "pkey_index=max", 0 }, { "port=0", 0 }, { "port=2", 0 },
			{ "access=LW", 0 }, { "access=MWB", 0 }, { "access=ZB", 0 }, { "access=all", 0 },
			{ "path_mtu=0", 1 }, { "path_mtu=4096", 1 }, { "path_mtu=6", 1 },
			{ "path_mtu=7", 1 }, { "max_dest_rd_atomic=0", 1 },
			{ "max_dest_rd_atomic=16", 1 }, { "max_dest_rd_atomic=129", 1 },
			{ "max_dest_rd_atomic=255", 1 }, { "min_rnr_timer=31", 1 },
			{ "min_rnr_timer=32", 1 }, { "sgid_index=max", 1 }, { "is_global=0", 1 },
			{ "hop_limit=0", 1 }, { "sl=15", 1 }, { "sl=16", 1 }, { "port=2", 1 },
			{ "timeout=0", 2 }, { "timeout=31", 2 }, { "timeout=32", 2 },
			{ "retry_cnt=8", 2 }, { "rnr_retry=8", 2 }, { "max_rd_atomic=0", 2 },
			{ "max_rd_atomic=16", 2 }, { "max_rd_atomic=129", 2 }, { "max_rd_atomic=255", 2 },
			{ "sq_psn=0xffffffff", 2 },
		};
		for (unsigned v = 0; v < sizeof vals / sizeof vals[0]; v++) {
			int step = vals[v].step;
			const char *n = vals[v].n;
			int req = step == 0 ? mask_init(t) : step == 1 ? mask_rtr(t) : mask_rts(t);
			FILL();
			if (!strcmp(n, "pkey_index=1"))
				a.pkey_index = 1;
			else if (!strcmp(n, "pkey_index=max"))
				a.pkey_index = pattr.pkey_tbl_len;
			else if (!strcmp(n, "port=0"))
				a.port_num = 0, req |= step == 1 ? IBV_QP_PORT : 0, a.ah_attr.port_num = step == 1 ? 1 : 0;
			else if (!strcmp(n, "port=2"))
				a.port_num = 2, a.ah_attr.port_num = 2;
			else if (!strcmp(n, "access=LW"))
				a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
			else if (!strcmp(n, "access=MWB"))
				a.qp_access_flags = IBV_ACCESS_MW_BIND;
			else if (!strcmp(n, "access=ZB"))
				a.qp_access_flags = IBV_ACCESS_ZERO_BASED;
			else if (!strcmp(n, "access=all"))
				a.qp_access_flags = 0x3f;
			else if (!strncmp(n, "path_mtu=", 9))
				a.path_mtu = !strcmp(n + 9, "4096") ? IBV_MTU_4096 : atoi(n + 9);
			else if (!strncmp(n, "max_dest_rd_atomic=", 19))
				a.max_dest_rd_atomic = atoi(n + 19);
			else if (!strncmp(n, "min_rnr_timer=", 14))
				a.min_rnr_timer = atoi(n + 14);
			else if (!strcmp(n, "sgid_index=max"))
				a.ah_attr.grh.sgid_index = pattr.gid_tbl_len;
			else if (!strcmp(n, "is_global=0"))
				a.ah_attr.is_global = 0;
			else if (!strcmp(n, "hop_limit=0"))
				a.ah_attr.grh.hop_limit = 0;
			else if (!strncmp(n, "sl=", 3))
				a.ah_attr.sl = atoi(n + 3);
			else if (!strncmp(n, "timeout=", 8))
				a.timeout = atoi(n + 8);
			else if (!strncmp(n, "retry_cnt=", 10))
				a.retry_cnt = atoi(n + 10);
			else if (!strncmp(n, "rnr_retry=", 10))
				a.rnr_retry = atoi(n + 10);
			else if (!strncmp(n, "max_rd_atomic=", 14))
				a.max_rd_atomic = atoi(n + 14);
			else if (!strcmp(n, "sq_psn=0xffffffff"))
				a.sq_psn = 0xffffffff;
			if (step == 1 && t == IBV_QPT_UD)
				continue; /* UD's RTR takes only the state */
			transition(pd, t, step, &a, req,
				   ID("qp.modify.%s.%s.%s", tn,
				      step == 0 ? "reset_init" : step == 1 ? "init_rtr" : "rtr_rts", n));
		}
#undef FILL
	}

	/* what ibv_query_qp reports after each step of an RC QP */
	const struct ibv_qp_cap cap = { 8, 8, 1, 1, 0 };
	struct ibv_qp *qp = make_qp(pd, IBV_QPT_RC, NULL, cap, 0);
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	int all = 0x1fffff;
	for (int step = 0; step < 4 && qp; step++) {
		if (step == 1) {
			attr_init(&a, IBV_QPT_RC);
			ibv_modify_qp(qp, &a, mask_init(IBV_QPT_RC));
		} else if (step == 2) {
			attr_rtr(&a, qp->qp_num);
			ibv_modify_qp(qp, &a, mask_rtr(IBV_QPT_RC));
		} else if (step == 3) {
			attr_rts(&a);
			ibv_modify_qp(qp, &a, mask_rts(IBV_QPT_RC));
		}
		memset(&q, 0, sizeof q);
		int rc = ibv_query_qp(qp, &q, all, &qi);
		line(ID("qp.query.rc.step%d", step),
		     "%s state=%d cur=%d mtu=%d mig=%d qkey=%u rq_psn=%u sq_psn=%u dest=%s access=%s "
		     "pkey=%u port=%u rd=%u dest_rd=%u rnr=%u timeout=%u retry=%u rnr_retry=%u "
		     "sqd_notify=%u sqd=%u is_global=%u hop=%u sgid=%s",
		     rc ? ename(rc) : "ok", q.qp_state, q.cur_qp_state, q.path_mtu, q.path_mig_state,
		     q.qkey, q.rq_psn, q.sq_psn, q.dest_qp_num == qp->qp_num ? "self" : q.dest_qp_num ? "other" : "0",
		     access_str(q.qp_access_flags), q.pkey_index, q.port_num, q.max_rd_atomic,
		     q.max_dest_rd_atomic, q.min_rnr_timer, q.timeout, q.retry_cnt, q.rnr_retry,
		     q.en_sqd_async_notify, q.sq_draining, q.ah_attr.is_global, q.ah_attr.grh.hop_limit,
		     /* the RoCE v2 IPv4 GID's index differs between the stacks */
		     step >= 2 && q.ah_attr.grh.sgid_index == gidx ? "roce_v2_ipv4" :
		     q.ah_attr.grh.sgid_index == 0 ? "0" : "other");
	}
	if (qp)
		ibv_destroy_qp(qp);
}

/* ---- shared receive queues ------------------------------------------------ */

static void cases_srq(struct ibv_pd *pd)
{
	int mw = dattr.max_srq_wr, ms = dattr.max_srq_sge;
	const struct {
		const char *n;
		int wr, sge, limit;
	} c[] = {
		{ "wr=0", 0, 1, 0 }, { "wr=1", 1, 1, 0 }, { "wr=2", 2, 1, 0 }, { "wr=100", 100, 1, 0 },
		{ "wr=max", mw, 1, 0 }, { "wr=max+1", mw + 1, 1, 0 }, { "sge=0", 16, 0, 0 },
		{ "sge=max", 16, ms, 0 }, { "sge=max+1", 16, ms + 1, 0 }, { "limit=8", 16, 1, 8 },
		{ "limit=16", 16, 1, 16 }, { "limit=17", 16, 1, 17 },
	};
	for (unsigned i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct ibv_srq_init_attr ia = { .attr = { c[i].wr, c[i].sge, c[i].limit } };
		struct ibv_srq *srq = ibv_create_srq(pd, &ia);
		if (!srq) {
			null_line(ID("srq.create.%s", c[i].n));
			continue;
		}
		struct ibv_srq_attr q;
		int rc = ibv_query_srq(srq, &q);
		line(ID("srq.create.%s", c[i].n), "ok attr=%u,%u,%u query=%s %u,%u,%u", ia.attr.max_wr,
		     ia.attr.max_sge, ia.attr.srq_limit, rc ? ename(rc) : "ok", q.max_wr, q.max_sge,
		     q.srq_limit);
		ibv_destroy_srq(srq);
	}
	const struct {
		const char *n;
		int mask, wr, limit;
	} m[] = {
		{ "limit=0", IBV_SRQ_LIMIT, 0, 0 }, { "limit=4", IBV_SRQ_LIMIT, 0, 4 },
		{ "limit=16", IBV_SRQ_LIMIT, 0, 16 }, { "limit=17", IBV_SRQ_LIMIT, 0, 17 },
		{ "limit=max", IBV_SRQ_LIMIT, 0, mw },
		{ "max_wr=8", IBV_SRQ_MAX_WR, 8, 0 }, { "max_wr=32", IBV_SRQ_MAX_WR, 32, 0 },
		{ "max_wr=max", IBV_SRQ_MAX_WR, mw, 0 }, { "max_wr=max+1", IBV_SRQ_MAX_WR, mw + 1, 0 },
		{ "max_wr=0", IBV_SRQ_MAX_WR, 0, 0 },
		{ "both=32,4", IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT, 32, 4 }, { "mask=0", 0, 0, 0 },
		{ "mask=4", 4, 0, 0 },
	};
	for (unsigned i = 0; i < sizeof m / sizeof m[0]; i++) {
		struct ibv_srq_init_attr ia = { .attr = { 16, 1, 0 } };
		struct ibv_srq *srq = ibv_create_srq(pd, &ia);
		if (!srq)
			continue;
		struct ibv_srq_attr a = { .max_wr = m[i].wr, .srq_limit = m[i].limit };
		int rc = ibv_modify_srq(srq, &a, m[i].mask);
		struct ibv_srq_attr q;
		memset(&q, 0, sizeof q);
		ibv_query_srq(srq, &q);
		line(ID("srq.modify.%s", m[i].n), "%s%s after=%u,%u,%u", rc ? "err " : "ok",
		     rc ? ename(rc) : "", q.max_wr, q.max_sge, q.srq_limit);
		ibv_destroy_srq(srq);
	}
	/* posting beyond the SRQ's size */
	struct ibv_srq_init_attr ia = { .attr = { 4, 1, 0 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &ia);
	if (srq) {
		static char b[64];
		struct ibv_mr *mr = ibv_reg_mr(pd, b, sizeof b, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sge = { (uintptr_t)b, 8, mr->lkey };
		struct ibv_recv_wr wr = { .num_sge = 1, .sg_list = &sge }, *bad;
		int n = 0, rc = 0;
		while (n < 100 && !(rc = ibv_post_srq_recv(srq, &wr, &bad)))
			n++;
		line("srq.post.beyond_size", "posted=%s then %s", n == (int)ia.attr.max_wr ? "max_wr" : n > (int)ia.attr.max_wr ? "more" : "fewer", ename(rc));
		struct ibv_recv_wr two = { .num_sge = 2, .sg_list = &sge };
		struct ibv_srq *s2 = ibv_create_srq(pd, &(struct ibv_srq_init_attr){ .attr = { 4, 1, 0 } });
		rc_line("srq.post.too_many_sge", ibv_post_srq_recv(s2, &two, &bad));
		ibv_destroy_srq(s2);
		ibv_destroy_srq(srq);
		ibv_dereg_mr(mr);
	}
}

/* ---- address handles ------------------------------------------------------ */

static void cases_ah(struct ibv_pd *pd)
{
	const char *names[] = { "global", "not_global", "sgid=max", "port=0", "port=2", "hop=0",
				"sl=15", "rate=3", "dgid=zero", "dgid=multicast", "flow=0xfffff",
				"tclass=0xff" };
	for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };
		a.grh.dgid = gid;
		a.grh.sgid_index = gidx;
		a.grh.hop_limit = 64;
		switch (i) {
		case 1: a.is_global = 0; break;
		case 2: a.grh.sgid_index = pattr.gid_tbl_len; break;
		case 3: a.port_num = 0; break;
		case 4: a.port_num = 2; break;
		case 5: a.grh.hop_limit = 0; break;
		case 6: a.sl = 15; break;
		case 7: a.static_rate = 3; break;
		case 8: memset(&a.grh.dgid, 0, 16); break;
		case 9: memset(&a.grh.dgid, 0, 16); a.grh.dgid.raw[10] = 0xff; a.grh.dgid.raw[11] = 0xff;
			a.grh.dgid.raw[12] = 239; a.grh.dgid.raw[15] = 1; break;
		case 10: a.grh.flow_label = 0xfffff; break;
		case 11: a.grh.traffic_class = 0xff; break;
		}
		struct ibv_ah *ah = ibv_create_ah(pd, &a);
		if (!ah) {
			null_line(ID("ah.create.%s", names[i]));
			continue;
		}
		line(ID("ah.create.%s", names[i]), "ok");
		rc_line(ID("ah.destroy.%s", names[i]), ibv_destroy_ah(ah));
	}
}

/* ---- memory windows ------------------------------------------------------- */

static void cases_mw(struct ibv_pd *pd)
{
	static char buf[4096] __attribute__((aligned(64)));
	struct ibv_mw *mw;

	for (int t = 0; t <= 3; t++) {
		mw = ibv_alloc_mw(pd, t);
		if (!mw)
			null_line(ID("mw.alloc.type=%d", t));
		else
			line(ID("mw.alloc.type=%d", t), "ok type=%d rkey=%s", mw->type, mw->rkey ? "set" : "0");
		if (mw)
			rc_line(ID("mw.dealloc.type=%d", t), ibv_dealloc_mw(mw));
	}
	/* type 1 binds: the region's rights against the window's */
	const struct ibv_qp_cap cap = { 16, 16, 1, 1, 0 };
	struct ibv_qp *qp = make_qp(pd, IBV_QPT_RC, NULL, cap, 1);
	struct ibv_qp_attr a;
	attr_init(&a, IBV_QPT_RC);
	ibv_modify_qp(qp, &a, mask_init(IBV_QPT_RC));
	attr_rtr(&a, qp->qp_num);
	ibv_modify_qp(qp, &a, mask_rtr(IBV_QPT_RC));
	attr_rts(&a);
	ibv_modify_qp(qp, &a, mask_rts(IBV_QPT_RC));
	const int mr_access[] = {
		IBV_ACCESS_MW_BIND, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND,
		IBV_ACCESS_LOCAL_WRITE,
	};
	const int mw_access[] = {
		0, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_READ,
	};
	for (unsigned r = 0; r < sizeof mr_access / sizeof mr_access[0]; r++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, mr_access[r]);
		char mrs[64];
		snprintf(mrs, sizeof mrs, "%s", access_str(mr_access[r]));
		for (unsigned w = 0; w < sizeof mw_access / sizeof mw_access[0]; w++) {
			mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
			struct ibv_mw_bind bind = {
				.wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = { .mr = mr, .addr = (uintptr_t)buf, .length = 64,
					       .mw_access_flags = mw_access[w] },
			};
			const char *id = ID("mw.bind1.mr=%s.mw=%s", mrs, access_str(mw_access[w]));
			int rc = ibv_bind_mw(qp, mw, &bind);
			if (rc) {
				line(id, "err %s", ename(rc));
			} else {
				struct ibv_wc wc;
				int n = 0;
				for (int i = 0; i < 2000000 && !(n = ibv_poll_cq(scq, 1, &wc)); i++)
					;
				/* (a completion's opcode is defined only on success) */
				if (n != 1)
					line(id, "no completion");
				else if (wc.status == IBV_WC_SUCCESS)
					line(id, "wc success op=%s", opname(wc.opcode));
				else
					line(id, "wc %s", ibv_wc_status_str(wc.status));
				if (n == 1 && wc.status != IBV_WC_SUCCESS) {
					/* the QP is in error now: start again */
					ibv_destroy_qp(qp);
					qp = make_qp(pd, IBV_QPT_RC, NULL, cap, 1);
					attr_init(&a, IBV_QPT_RC);
					ibv_modify_qp(qp, &a, mask_init(IBV_QPT_RC));
					attr_rtr(&a, qp->qp_num);
					ibv_modify_qp(qp, &a, mask_rtr(IBV_QPT_RC));
					attr_rts(&a);
					ibv_modify_qp(qp, &a, mask_rts(IBV_QPT_RC));
				}
			}
			ibv_dealloc_mw(mw);
		}
		if (mr)
			ibv_dereg_mr(mr);
	}
	ibv_destroy_qp(qp);
}

/* ---- the data path: two RC QPs on the device, connected to each other ----- */

struct pair {
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
};

static int connect_rc(struct ibv_qp *q, uint32_t dest, int access)
{
	struct ibv_qp_attr a;
	attr_init(&a, IBV_QPT_RC);
	a.qp_access_flags = access;
	if (ibv_modify_qp(q, &a, mask_init(IBV_QPT_RC)))
		return -1;
	attr_rtr(&a, dest);
	a.rq_psn = 100;
	if (ibv_modify_qp(q, &a, mask_rtr(IBV_QPT_RC)))
		return -1;
	attr_rts(&a);
	a.sq_psn = 100;
	a.retry_cnt = 2;
	a.rnr_retry = 0;
	a.timeout = 10;
	return ibv_modify_qp(q, &a, mask_rts(IBV_QPT_RC));
}

static int make_pair(struct ibv_pd *pd, struct pair *p, int access_b, struct ibv_qp_cap cap)
{
	p->cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = p->cq, .recv_cq = p->cq, .cap = cap, .qp_type = IBV_QPT_RC };
	p->a = ibv_create_qp(pd, &ia);
	ia.cap = cap;
	p->b = ibv_create_qp(pd, &ia);
	if (!p->a || !p->b)
		return -1;
	int all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (connect_rc(p->a, p->b->qp_num, all) || connect_rc(p->b, p->a->qp_num, access_b))
		return -1;
	return 0;
}

static void free_pair(struct pair *p)
{
	if (p->a)
		ibv_destroy_qp(p->a);
	if (p->b)
		ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->cq);
}

/* The completions of one case, in order, each as "wc ..." (up to 4), with
 * the QP it belongs to ("a" the requester, "b" the responder). */
static void wcs_line(const char *id, struct pair *p, int want, const char *extra)
{
	char out[512] = "";
	struct ibv_wc wc;
	struct timespec t0, t;
	int got = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < want) {
		int n = ibv_poll_cq(p->cq, 1, &wc);
		if (n < 0) {
			strcat(out, " poll_error");
			break;
		}
		if (n == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > 3000)
				break;
			continue;
		}
		char one[160];
		snprintf(one, sizeof one, "%s[%s %s %s len=%u flags=%u%s]", got ? " " : "",
			 wc.qp_num == p->a->qp_num ? "a" : wc.qp_num == p->b->qp_num ? "b" : "?",
			 ibv_wc_status_str(wc.status), wc.status == IBV_WC_SUCCESS ? opname(wc.opcode) : "-",
			 wc.status == IBV_WC_SUCCESS ? wc.byte_len : 0,
			 wc.status == IBV_WC_SUCCESS ? wc.wc_flags : 0,
			 wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_IMM) ? " imm" : "");
		strncat(out, one, sizeof out - strlen(out) - 1);
		got++;
	}
	if (got < want)
		strncat(out, got ? " (then nothing)" : "none", sizeof out - strlen(out) - 1);
	line(id, "%s%s%s", out, extra ? " " : "", extra ? extra : "");
}

static void cases_data(struct ibv_pd *pd)
{
	static uint8_t src[8192] __attribute__((aligned(64))), dst[8192] __attribute__((aligned(64)));
	const struct ibv_qp_cap cap = { 8, 8, 2, 2, 64 };
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		 IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof src, rw);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof dst, rw);
	struct ibv_mr *ro = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rr = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_REMOTE_READ);
	if (!smr || !dmr || !ro || !rr) {
		line("data.setup", "failed %s", ename(errno));
		return;
	}
	struct {
		const char *n;
		enum ibv_wr_opcode op;
		uint32_t len;      /* of the request */
		uint32_t recv_len; /* of the receive posted on b (0: none) */
		int bad;           /* 1 rkey, 2 lkey, 3 range, 4 rkey without remote rights, 5 unaligned atomic,
				    * 6 QP b without remote rights, 7 inline, 8 remote-read-only region for WRITE,
				    * 9 two SGEs, 10 three SGEs (above max_send_sge) */
	} c[] = {
		{ "send.0", IBV_WR_SEND, 0, 64, 0 }, { "send.1", IBV_WR_SEND, 1, 64, 0 },
		{ "send.4096", IBV_WR_SEND, 4096, 4096, 0 }, { "send.5000", IBV_WR_SEND, 5000, 8192, 0 },
		{ "send.longer_than_recv", IBV_WR_SEND, 100, 50, 0 },
		{ "send.imm", IBV_WR_SEND_WITH_IMM, 16, 64, 0 },
		{ "send.inline.64", IBV_WR_SEND, 64, 64, 7 }, { "send.inline.65", IBV_WR_SEND, 65, 128, 7 },
		{ "send.two_sge", IBV_WR_SEND, 64, 128, 9 }, { "send.three_sge", IBV_WR_SEND, 64, 128, 10 },
		{ "send.bad_lkey", IBV_WR_SEND, 16, 64, 2 }, { "send.lkey_range", IBV_WR_SEND, 16, 64, 3 },
		{ "write.0", IBV_WR_RDMA_WRITE, 0, 0, 0 }, { "write.4096", IBV_WR_RDMA_WRITE, 4096, 0, 0 },
		{ "write.imm", IBV_WR_RDMA_WRITE_WITH_IMM, 32, 64, 0 },
		{ "write.imm.no_recv", IBV_WR_RDMA_WRITE_WITH_IMM, 32, 0, 0 },
		{ "write.bad_rkey", IBV_WR_RDMA_WRITE, 16, 0, 1 },
		{ "write.rkey_range", IBV_WR_RDMA_WRITE, 16, 0, 3 },
		{ "write.no_remote_write_mr", IBV_WR_RDMA_WRITE, 16, 0, 8 },
		{ "write.qp_without_rights", IBV_WR_RDMA_WRITE, 16, 0, 6 },
		{ "read.0", IBV_WR_RDMA_READ, 0, 0, 0 }, { "read.8", IBV_WR_RDMA_READ, 8, 0, 0 },
		{ "read.5000", IBV_WR_RDMA_READ, 5000, 0, 0 },
		{ "read.bad_rkey", IBV_WR_RDMA_READ, 16, 0, 1 },
		{ "read.rkey_range", IBV_WR_RDMA_READ, 16, 0, 3 },
		{ "read.no_remote_rights_mr", IBV_WR_RDMA_READ, 16, 0, 4 },
		{ "read.qp_without_rights", IBV_WR_RDMA_READ, 16, 0, 6 },
		{ "fadd", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 0, 0 },
		{ "cswap", IBV_WR_ATOMIC_CMP_AND_SWP, 8, 0, 0 },
		{ "fadd.unaligned", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 0, 5 },
		{ "fadd.len4", IBV_WR_ATOMIC_FETCH_AND_ADD, 4, 0, 0 },
		{ "fadd.bad_rkey", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 0, 1 },
		{ "fadd.qp_without_rights", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 0, 6 },
		{ "fadd.no_atomic_mr", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 0, 4 },
		{ "send.no_recv_rnr", IBV_WR_SEND, 16, 0, 0 },
		{ "send_inv.bad", IBV_WR_SEND_WITH_INV, 16, 64, 0 },
		{ "local_inv.bad", IBV_WR_LOCAL_INV, 0, 0, 0 },
	};
	for (unsigned i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct pair p = { 0 };
		int access_b = c[i].bad == 6 ? 0 : IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		const char *id = ID("data.rc.%s", c[i].n);
		if (make_pair(pd, &p, access_b, cap)) {
			line(id, "setup failed %s", ename(errno));
			free_pair(&p);
			continue;
		}
		for (unsigned k = 0; k < sizeof src; k++)
			src[k] = (uint8_t)(k * 7 + i);
		memset(dst, 0xee, sizeof dst);
		*(uint64_t *)dst = 5;
		int want = 1;
		char idr[256];
		snprintf(idr, sizeof idr, "%s", id);
		if (c[i].recv_len) {
			struct ibv_sge rs = { (uintptr_t)dst, c[i].recv_len, dmr->lkey };
			struct ibv_recv_wr r = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *bad;
			int rc = ibv_post_recv(p.b, &r, &bad);
			if (rc) {
				line(idr, "post_recv err %s", ename(rc));
				free_pair(&p);
				continue;
			}
			want = 2;
		}
		struct ibv_sge ss[3] = { { (uintptr_t)src, c[i].len, smr->lkey },
					 { (uintptr_t)src + 4096, 16, smr->lkey },
					 { (uintptr_t)src + 5000, 16, smr->lkey } };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = ss, .num_sge = 1, .opcode = c[i].op,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		uint64_t raddr = (uintptr_t)dst;
		uint32_t rkey = dmr->rkey;
		if (c[i].op == IBV_WR_RDMA_READ) {
			ss[0].addr = (uintptr_t)dst;
			ss[0].lkey = dmr->lkey;
			raddr = (uintptr_t)src;
			rkey = smr->rkey;
		}
		switch (c[i].bad) {
		case 1: rkey ^= 0x5a5a00; break;
		case 2: ss[0].lkey ^= 0x5a5a00; break;
		case 3: if (c[i].op == IBV_WR_SEND) ss[0].addr = (uintptr_t)src + sizeof src - 8; else raddr += 8192 - 8; break;
		case 4: rkey = c[i].op == IBV_WR_RDMA_READ ? ro->rkey : rr->rkey; break;
		case 5: raddr += 4; break;
		case 7: w.send_flags |= IBV_SEND_INLINE; break;
		case 8: rkey = rr->rkey; break;
		case 9: w.num_sge = 2; break;
		case 10: w.num_sge = 3; break;
		}
		if (c[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD || c[i].op == IBV_WR_ATOMIC_CMP_AND_SWP) {
			w.wr.atomic.remote_addr = raddr;
			w.wr.atomic.rkey = rkey;
			w.wr.atomic.compare_add = 5;
			w.wr.atomic.swap = 9;
		} else {
			w.wr.rdma.remote_addr = raddr;
			w.wr.rdma.rkey = rkey;
		}
		w.imm_data = htonl(0x1234);
		if (c[i].op == IBV_WR_SEND_WITH_INV || c[i].op == IBV_WR_LOCAL_INV)
			w.invalidate_rkey = 0x12345678;
		int rc = ibv_post_send(p.a, &w, &bad);
		if (rc) {
			line(idr, "post_send err %s", ename(rc));
			free_pair(&p);
			continue;
		}
		/* what landed: a checksum of dst (or of src for READ targets) */
		wcs_line(idr, &p, want, NULL);
		uint32_t h = 2166136261u;
		for (unsigned k = 0; k < sizeof dst; k++)
			h = (h ^ dst[k]) * 16777619u;
		line(ID("%s.landed", idr), "fnv=%08x first8=%016llx", h, (unsigned long long)*(uint64_t *)dst);
		line(ID("%s.states", idr), "a=%d b=%d", qp_state(p.a), qp_state(p.b));
		free_pair(&p);
	}

	/* ATOMIC WRITE (Linux 6.2 on) through ibv_wr_atomic_write on an
	 * extended QP: aligned, unaligned, a bad rkey, a region and a QP
	 * without remote write. */
	{
		struct {
			const char *n;
			int bad; /* 1 rkey, 4 remote-read-only region, 5 unaligned, 6 QP b without rights */
		} aw[] = { { "ok", 0 }, { "unaligned", 5 }, { "bad_rkey", 1 },
			   { "no_remote_write_mr", 4 }, { "qp_without_rights", 6 } };
		for (unsigned i = 0; i < sizeof aw / sizeof aw[0]; i++) {
			char id[128];
			snprintf(id, sizeof id, "data.rc.atomic_write.%s", aw[i].n);
			struct pair p = { 0 };
			p.cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
			struct ibv_qp_init_attr_ex ax = {
				.send_cq = p.cq, .recv_cq = p.cq, .cap = cap, .qp_type = IBV_QPT_RC,
				.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
				.pd = pd, .send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_SEND
			};
			p.a = ibv_create_qp_ex(ctx, &ax);
			if (!p.a) {
				line(id, "create_qp_ex err %s", ename(errno));
				ibv_destroy_cq(p.cq);
				continue;
			}
			struct ibv_qp_init_attr ia = { .send_cq = p.cq, .recv_cq = p.cq, .cap = cap,
						       .qp_type = IBV_QPT_RC };
			p.b = ibv_create_qp(pd, &ia);
			int all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
			if (!p.b || connect_rc(p.a, p.b->qp_num, all) ||
			    connect_rc(p.b, p.a->qp_num, aw[i].bad == 6 ? 0 : all)) {
				line(id, "setup failed %s", ename(errno));
				free_pair(&p);
				continue;
			}
			memset(dst, 0xee, sizeof dst);
			uint64_t v = 0x1122334455667788ULL + i;
			uint64_t raddr = (uintptr_t)dst + 64;
			uint32_t rkey = dmr->rkey;
			switch (aw[i].bad) {
			case 1: rkey ^= 0x5a5a00; break;
			case 4: rkey = rr->rkey; break;
			case 5: raddr += 4; break;
			}
			struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p.a);
			ibv_wr_start(qx);
			qx->wr_id = 1;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_atomic_write(qx, rkey, raddr, &v);
			int rc = ibv_wr_complete(qx);
			if (rc) {
				line(id, "wr_complete err %s", ename(rc));
				free_pair(&p);
				continue;
			}
			wcs_line(id, &p, 1, NULL);
			uint32_t h = 2166136261u;
			for (unsigned k = 0; k < sizeof dst; k++)
				h = (h ^ dst[k]) * 16777619u;
			line(ID("%s.landed", id), "fnv=%08x at64=%016llx", h,
			     (unsigned long long)*(uint64_t *)(dst + 64));
			line(ID("%s.states", id), "a=%d b=%d", qp_state(p.a), qp_state(p.b));
			free_pair(&p);
		}
	}

	/* UD: a datagram to a second UD QP of the device, through an AH */
	{
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .cap = { 4, 4, 1, 1, 0 },
					       .qp_type = IBV_QPT_UD };
		struct ibv_qp *ua = ibv_create_qp(pd, &ia), *ub = ibv_create_qp(pd, &ia);
		struct ibv_qp_attr a;
		int ok = ua && ub;
		for (int k = 0; ok && k < 2; k++) {
			struct ibv_qp *q = k ? ub : ua;
			attr_init(&a, IBV_QPT_UD);
			ok = !ibv_modify_qp(q, &a, mask_init(IBV_QPT_UD));
			memset(&a, 0, sizeof a);
			a.qp_state = IBV_QPS_RTR;
			ok = ok && !ibv_modify_qp(q, &a, IBV_QP_STATE);
			attr_rts(&a);
			ok = ok && !ibv_modify_qp(q, &a, mask_rts(IBV_QPT_UD));
		}
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
		aa.grh.dgid = gid;
		aa.grh.sgid_index = gidx;
		aa.grh.hop_limit = 64;
		struct ibv_ah *ah = ok ? ibv_create_ah(pd, &aa) : NULL;
		memset(dst, 0, 256);
		struct ibv_sge rs = { (uintptr_t)dst, 40 + 64, dmr->lkey }, ss = { (uintptr_t)src, 16, smr->lkey };
		struct ibv_recv_wr r = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *rbad;
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		if (ah) {
			w.wr.ud.ah = ah;
			w.wr.ud.remote_qpn = ub->qp_num;
			w.wr.ud.remote_qkey = 0x11111111;
		}
		if (!ah || ibv_post_recv(ub, &r, &rbad) || ibv_post_send(ua, &w, &bad)) {
			line("data.ud.send", "setup failed %s", ename(errno));
		} else {
			struct ibv_wc wc;
			int got = 0, n;
			char out[256] = "";
			char ra[96] = "", rb[96] = "";
			for (int k = 0; k < 3000000 && got < 2; k++) {
				if ((n = ibv_poll_cq(cq, 1, &wc)) <= 0)
					continue;
				got++;
				/* the two complete in either order: printed b, then a */
				snprintf(wc.qp_num == ub->qp_num ? rb : ra, sizeof ra, "[%s %s len=%u flags=%u]",
					 wc.qp_num == ub->qp_num ? "b" : "a", ibv_wc_status_str(wc.status),
					 wc.byte_len, wc.wc_flags);
				if (wc.qp_num == ub->qp_num) {
					line("data.ud.send.recv.sl", "%u", wc.sl);
					line("data.ud.send.recv.src_qp", "%s", wc.src_qp == ua->qp_num ? "a" : "other");
					/* the GRH area: an IPv4 header in its last 20 bytes */
					line("data.ud.send.recv.grh", "ipv4_header=%d proto=%u",
					     dst[20] == 0x45, dst[20 + 9]);
				}
			}
			snprintf(out, sizeof out, "%s %s", rb[0] ? rb : "[b none]", ra[0] ? ra : "[a none]");
			line("data.ud.send", "%s", out);
		}
		if (ah)
			ibv_destroy_ah(ah);
		if (ua)
			ibv_destroy_qp(ua);
		if (ub)
			ibv_destroy_qp(ub);
		ibv_destroy_cq(cq);
	}

	/* a message larger than the port's max_msg_sz (the kernel reports
	 * 8 MiB): is it a limit, or only a number? */
	{
		size_t big = 9u << 20;
		uint8_t *bs = malloc(big), *bd = malloc(big);
		struct ibv_mr *bsm = bs ? ibv_reg_mr(pd, bs, big, rw) : NULL;
		struct ibv_mr *bdm = bd ? ibv_reg_mr(pd, bd, big, rw) : NULL;
		struct pair p = { 0 };
		if (bsm && bdm && !make_pair(pd, &p, IBV_ACCESS_REMOTE_WRITE, cap)) {
			for (size_t k = 0; k < big; k++)
				bs[k] = (uint8_t)(k * 13);
			memset(bd, 0, big);
			struct ibv_sge sg = { (uintptr_t)bs, (uint32_t)big, bsm->lkey };
			struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sg, .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
			w.wr.rdma.remote_addr = (uintptr_t)bd;
			w.wr.rdma.rkey = bdm->rkey;
			int rc = ibv_post_send(p.a, &w, &bad);
			if (rc)
				line("data.rc.write.9MiB", "post_send err %s", ename(rc));
			else {
				wcs_line("data.rc.write.9MiB", &p, 1, NULL);
				line("data.rc.write.9MiB.landed", "%s",
				     memcmp(bs, bd, big) ? "differs" : "same");
			}
		} else {
			line("data.rc.write.9MiB", "setup failed %s", ename(errno));
		}
		free_pair(&p);
		if (bsm)
			ibv_dereg_mr(bsm);
		if (bdm)
			ibv_dereg_mr(bdm);
		free(bs);
		free(bd);
	}

	/* posting more work than the queue holds, and in the wrong states */
	{
		struct pair p = { 0 };
		make_pair(pd, &p, IBV_ACCESS_REMOTE_WRITE, cap);
		struct ibv_sge s = { (uintptr_t)dst, 8, dmr->lkey };
		struct ibv_recv_wr r = { .sg_list = &s, .num_sge = 1 }, *rbad;
		int n = 0, rc = 0;
		while (n < 100 && !(rc = ibv_post_recv(p.b, &r, &rbad)))
			n++;
		line("data.rc.post_recv.beyond_cap", "posted=%d then %s", n, ename(rc));
		struct ibv_recv_wr r3 = { .sg_list = &s, .num_sge = 3 };
		rc_line("data.rc.post_recv.too_many_sge", ibv_post_recv(p.a, &r3, &rbad));
		free_pair(&p);
	}
	{
		struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .cap = cap, .qp_type = IBV_QPT_RC };
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);
		struct ibv_sge s = { (uintptr_t)src, 8, smr->lkey };
		struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
		struct ibv_recv_wr r = { .sg_list = &s, .num_sge = 1 }, *rbad;
		rc_line("data.rc.reset.post_send", ibv_post_send(qp, &w, &bad));
		rc_line("data.rc.reset.post_recv", ibv_post_recv(qp, &r, &rbad));
		struct ibv_qp_attr a;
		attr_init(&a, IBV_QPT_RC);
		ibv_modify_qp(qp, &a, mask_init(IBV_QPT_RC));
		rc_line("data.rc.init.post_send", ibv_post_send(qp, &w, &bad));
		rc_line("data.rc.init.post_recv", ibv_post_recv(qp, &r, &rbad));
		attr_rtr(&a, qp->qp_num);
		ibv_modify_qp(qp, &a, mask_rtr(IBV_QPT_RC));
		rc_line("data.rc.rtr.post_send", ibv_post_send(qp, &w, &bad));
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_ERR;
		ibv_modify_qp(qp, &a, IBV_QP_STATE);
		rc_line("data.rc.err.post_send", ibv_post_send(qp, &w, &bad));
		rc_line("data.rc.err.post_recv", ibv_post_recv(qp, &r, &rbad));
		struct ibv_wc wc[8];
		int n, tot = 0, flush = 1;
		for (int k = 0; k < 1000 && tot < 4; k++) {
			n = ibv_poll_cq(cq, 8, wc);
			for (int j = 0; j < n; j++)
				flush &= wc[j].status == IBV_WC_WR_FLUSH_ERR;
			tot += n > 0 ? n : 0;
			if (n <= 0)
				usleep(1000);
		}
		line("data.rc.err.flushed", "completions=%d all_flush=%d", tot, flush);
		ibv_destroy_qp(qp);
		ibv_destroy_cq(cq);
	}
	/* a send queue filled: its peer is left in RESET, which drops what
	 * arrives, so nothing is acknowledged and nothing leaves the queue */
	{
		struct pair p = { 0 };
		p.cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
		struct ibv_qp_init_attr ia = { .send_cq = p.cq, .recv_cq = p.cq, .cap = cap, .qp_type = IBV_QPT_RC };
		p.a = ibv_create_qp(pd, &ia);
		p.b = ibv_create_qp(pd, &ia);
		connect_rc(p.a, p.b->qp_num, IBV_ACCESS_REMOTE_WRITE);
		struct ibv_sge s = { (uintptr_t)src, 8, smr->lkey };
		struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE }, *bad;
		w.wr.rdma.remote_addr = (uintptr_t)dst;
		w.wr.rdma.rkey = dmr->rkey;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		ibv_query_qp(p.a, &qa, IBV_QP_CAP, &qi);
		int n = 0, rc = 0;
		while (n < 200 && !(rc = ibv_post_send(p.a, &w, &bad)))
			n++;
		line("data.rc.post_send.beyond_cap", "posted=%s then %s",
		     n == (int)qi.cap.max_send_wr ? "cap" : n > (int)qi.cap.max_send_wr ? "more" : "fewer",
		     ename(rc));
		free_pair(&p);
	}
	/* a CQ resized while completions wait in it */
	{
		struct pair p = { 0 };
		make_pair(pd, &p, IBV_ACCESS_REMOTE_WRITE, cap);
		struct ibv_sge s = { (uintptr_t)src, 8, smr->lkey };
		struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.wr.rdma.remote_addr = (uintptr_t)dst;
		w.wr.rdma.rkey = dmr->rkey;
		for (int k = 0; k < 6; k++)
			ibv_post_send(p.a, &w, &bad);
		usleep(200000);
		int rc = ibv_resize_cq(p.cq, 4);
		line("data.cq.resize_below_queued", "%s%s cqe=%s", rc ? "err " : "ok", rc ? ename(rc) : "", p.cq->cqe >= 6 ? ">=6" : "<6");
		rc = ibv_resize_cq(p.cq, 512);
		line("data.cq.resize_grow_queued", "%s%s", rc ? "err " : "ok", rc ? ename(rc) : "");
		struct ibv_wc wc[16];
		int tot = 0;
		for (int k = 0; k < 100 && tot < 6; k++) {
			int n = ibv_poll_cq(p.cq, 16, wc);
			tot += n > 0 ? n : 0;
		}
		line("data.cq.resize_kept", "completions=%d", tot);
		free_pair(&p);
	}
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_dereg_mr(ro);
	ibv_dereg_mr(rr);
}

/* ---- cmd_fd and the import verbs ---------------------------------------------- */

static void import_line(const char *id, struct ibv_context *ic)
{
	if (!ic) {
		null_line(id);
		return;
	}
	line(id, "ok");
	ibv_close_device(ic);
}

static void cases_import(struct ibv_pd *pd)
{
	struct stat st;
	line("ctx.cmd_fd.fstat", "%s", fstat(ctx->cmd_fd, &st) ? ename(errno) : S_ISCHR(st.st_mode) ? "chr" : "other");
	line("ctx.cmd_fd.fcntl", "%s", fcntl(ctx->cmd_fd, F_GETFD) < 0 ? ename(errno) : "ok");
	import_line("import.device.own_cmd_fd", ibv_import_device(ctx->cmd_fd));
	import_line("import.device.fd=-1", ibv_import_device(-1));
	int fd = open("/dev/null", O_RDWR);
	import_line("import.device.dev_null", ibv_import_device(fd));
	close(fd);
	int p[2];
	if (!pipe(p)) {
		import_line("import.device.pipe", ibv_import_device(p[0]));
		close(p[0]);
		close(p[1]);
	}
	struct ibv_pd *ip = ibv_import_pd(ctx, pd->handle);
	if (ip) {
		line("import.pd", "ok");
		ibv_unimport_pd(ip);
	} else {
		null_line("import.pd");
	}
	static uint8_t b[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, b, sizeof b, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *im = mr ? ibv_import_mr(pd, mr->handle) : NULL;
	if (im) {
		line("import.mr", "ok");
		ibv_unimport_mr(im);
	} else {
		null_line("import.mr");
	}
	if (mr)
		ibv_dereg_mr(mr);
}

/* ---- UD multicast ---------------------------------------------------------- */

/* A UD QP moved to RTS (0 on failure). */
static struct ibv_qp *ud_rts(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .cap = { 4, 4, 1, 1, 0 },
				       .qp_type = IBV_QPT_UD };
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a;
	if (!q)
		return NULL;
	attr_init(&a, IBV_QPT_UD);
	int ok = !ibv_modify_qp(q, &a, mask_init(IBV_QPT_UD));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	ok = ok && !ibv_modify_qp(q, &a, IBV_QP_STATE);
	attr_rts(&a);
	ok = ok && !ibv_modify_qp(q, &a, mask_rts(IBV_QPT_UD));
	if (!ok) {
		ibv_destroy_qp(q);
		return NULL;
	}
	return q;
}

/* The IPv4-mapped GID of group 239.0.0.n. */
static union ibv_gid mgid(int n)
{
	union ibv_gid g = { 0 };
	g.raw[10] = g.raw[11] = 0xff;
	g.raw[12] = 239;
	g.raw[15] = (uint8_t)n;
	return g;
}

static void cases_mcast(struct ibv_pd *pd, void *buf, struct ibv_mr *mr)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .cap = { 4, 4, 1, 1, 0 },
				       .qp_type = IBV_QPT_UD };
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	union ibv_gid g1 = mgid(1), zero = { 0 }, v6 = { 0 };
	v6.raw[0] = 0xff;
	v6.raw[1] = 0x0e;
	v6.raw[15] = 1;
	rc_line("mcast.attach.reset_qp", ibv_attach_mcast(q, &g1, 0));
	rc_line("mcast.attach.again", ibv_attach_mcast(q, &g1, 0));
	rc_line("mcast.attach.other_lid", ibv_attach_mcast(q, &g1, 5));
	rc_line("mcast.detach.other_lid", ibv_detach_mcast(q, &g1, 5));
	rc_line("mcast.destroy_qp.attached", ibv_destroy_qp(q));
	rc_line("mcast.detach", ibv_detach_mcast(q, &g1, 0));
	rc_line("mcast.detach.again", ibv_detach_mcast(q, &g1, 0));
	rc_line("mcast.detach.never", ibv_detach_mcast(q, &v6, 0));
	rc_line("mcast.attach.unicast_gid", ibv_attach_mcast(q, &gid, 0));
	rc_line("mcast.attach.zero_gid", ibv_attach_mcast(q, &zero, 0));
	rc_line("mcast.attach.ipv6_gid", ibv_attach_mcast(q, &v6, 0));
	rc_line("mcast.detach.ipv6_gid", ibv_detach_mcast(q, &v6, 0));
	rc_line("mcast.destroy_qp.detached", ibv_destroy_qp(q));
	ia.qp_type = IBV_QPT_RC;
	q = ibv_create_qp(pd, &ia);
	rc_line("mcast.attach.rc_qp", ibv_attach_mcast(q, &g1, 0));
	ibv_destroy_qp(q);
	ia.qp_type = IBV_QPT_UC;
	q = ibv_create_qp(pd, &ia);
	rc_line("mcast.attach.uc_qp", ibv_attach_mcast(q, &g1, 0));
	ibv_destroy_qp(q);

	/* max_mcast_qp_attach QPs in one group, then one more */
	{
		struct ibv_qp *qs[64];
		int n = 0, rc = 0;
		ia.qp_type = IBV_QPT_UD;
		ia.cap = (struct ibv_qp_cap){ 1, 1, 1, 1, 0 };
		while (n < 64 && (qs[n] = ibv_create_qp(pd, &ia)) && !(rc = ibv_attach_mcast(qs[n], &g1, 0)))
			n++;
		line("mcast.attach.group_full", "attached=%s then %s",
		     n == dattr.max_mcast_qp_attach ? "max_mcast_qp_attach" : "other", rc ? ename(rc) : "none");
		if (n < 64 && qs[n])
			ibv_destroy_qp(qs[n]);
		for (int k = 0; k < n; k++) {
			ibv_detach_mcast(qs[k], &g1, 0);
			ibv_destroy_qp(qs[k]);
		}
	}

	/* a datagram to a group: to the attached QPs, the sender's included,
	 * not to the others. The harness joins the group's IP address itself,
	 * as rdma_cm's join does (kernel rxe's attach alone joins no IP group). */
	{
		uint8_t *b = buf;
		struct in_addr ifa;
		memcpy(&ifa, &gid.raw[12], 4);
		int sock = socket(AF_INET, SOCK_DGRAM, 0);
		struct ip_mreq mr_ = { .imr_multiaddr.s_addr = htonl(0xef000002), .imr_interface = ifa };
		int joined = sock >= 0 && !setsockopt(sock, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr_, sizeof mr_);
		struct ibv_qp *qa = ud_rts(pd, cq), *qb = ud_rts(pd, cq), *qc = ud_rts(pd, cq);
		union ibv_gid g2 = mgid(2);
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
		aa.grh.dgid = g2;
		aa.grh.sgid_index = gidx;
		aa.grh.hop_limit = 64;
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		int ok = joined && qa && qb && qc && ah && !ibv_attach_mcast(qa, &g2, 0) &&
			 !ibv_attach_mcast(qb, &g2, 0);
		memset(b, 0, 1024);
		for (int k = 0; k < 3 && ok; k++) {
			struct ibv_sge rs = { (uintptr_t)b + 256 * k, 40 + 64, mr->lkey };
			struct ibv_recv_wr r = { .wr_id = 10 + k, .sg_list = &rs, .num_sge = 1 }, *rbad;
			ok = !ibv_post_recv(k == 0 ? qa : k == 1 ? qb : qc, &r, &rbad);
		}
		memcpy(b + 900, "multicast!", 10);
		struct ibv_sge ss = { (uintptr_t)b + 900, 10, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		if (ah) {
			w.wr.ud.ah = ah;
			w.wr.ud.remote_qpn = 0xffffff;
			w.wr.ud.remote_qkey = 0x11111111;
		}
		if (!ok || ibv_post_send(qa, &w, &bad)) {
			line("mcast.data", "setup failed %s", ename(errno));
		} else {
			struct ibv_wc wc;
			char got[3][64] = { "none", "none", "none" };
			char sent[64] = "none";
			/* the send and two receives; the third QP's is not to come */
			int n = 0;
			for (int k = 0; k < 2000 && n < 3; k++) {
				if (ibv_poll_cq(cq, 1, &wc) <= 0) {
					usleep(1000);
					continue;
				}
				n++;
				if (wc.opcode == IBV_WC_SEND) {
					snprintf(sent, sizeof sent, "%s", ibv_wc_status_str(wc.status));
					continue;
				}
				int i = (int)wc.wr_id - 10;
				if (i >= 0 && i < 3)
					snprintf(got[i], sizeof got[i], "%s len=%u src=%s data=%d", ibv_wc_status_str(wc.status),
						 wc.byte_len, wc.src_qp == qa->qp_num ? "a" : "other",
						 !memcmp(b + 256 * i + 40, "multicast!", 10));
			}
			usleep(100000);
			while (ibv_poll_cq(cq, 1, &wc) > 0)
				if (wc.wr_id == 12)
					snprintf(got[2], sizeof got[2], "%s", ibv_wc_status_str(wc.status));
			line("mcast.data.send", "%s", sent);
			line("mcast.data.sender_attached", "%s", got[0]);
			line("mcast.data.other_attached", "%s", got[1]);
			line("mcast.data.not_attached", "%s", got[2]);
			/* the GRH's destination: the group */
			line("mcast.data.grh_dst", "%u.%u.%u.%u", b[256 + 36], b[256 + 37], b[256 + 38], b[256 + 39]);
		}
		if (qa)
			ibv_detach_mcast(qa, &g2, 0);
		if (qb)
			ibv_detach_mcast(qb, &g2, 0);
		if (ah)
			ibv_destroy_ah(ah);
		if (qa)
			ibv_destroy_qp(qa);
		if (qb)
			ibv_destroy_qp(qb);
		if (qc)
			ibv_destroy_qp(qc);
		if (sock >= 0)
			close(sock);
	}
	ibv_destroy_cq(cq);
}

/* ---- the randomised mode --------------------------------------------------- */

static uint64_t rng_state;
static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return n ? (uint32_t)(rng_state % n) : 0;
}

/* An edge value for a limit m, and its name for the output (so that a
 * difference in the limit itself shows once, in the table's dev.* cases).
 * No "max": the kernel allocates a queue of that size at once, which in a
 * small guest is the OOM killer's business, not the verbs'. */
static const char *edge_name;
static int edge(int m)
{
	switch (rnd(6)) {
	case 0: edge_name = "0"; return 0;
	case 1: edge_name = "1"; return 1;
	case 2: edge_name = "max+1"; return m + 1;
	case 3: edge_name = "-1"; return -1;
	case 4: edge_name = "2"; return 2;
	default: edge_name = "16"; return 16;
	}
}

#define SLOTS 4
static void random_mode(struct ibv_pd *pd0, unsigned long seed, int steps)
{
	struct ibv_pd *pd[SLOTS] = { pd0 };
	struct ibv_cq *cq[SLOTS] = { 0 };
	struct ibv_mr *mr[SLOTS] = { 0 };
	struct ibv_qp *qp[SLOTS] = { 0 };
	struct ibv_srq *srq[SLOTS] = { 0 };
	struct ibv_mw *mw[SLOTS] = { 0 };
	static char mem[SLOTS][4096] __attribute__((aligned(4096)));
	char id[64];

	rng_state = seed * 2654435761u + 88172645463325252ull;
	for (int s = 0; s < steps; s++) {
		/* draw everything this step may use first, so that both stacks
		 * draw the same numbers whatever their earlier answers were */
		uint32_t op = rnd(16), i = rnd(SLOTS), j = rnd(SLOTS), k = rnd(SLOTS);
		int e1 = edge(dattr.max_qp_wr);
		const char *n1 = edge_name;
		int e2 = edge(dattr.max_sge), e3 = edge(dattr.max_cqe);
		const char *n3 = edge_name;
		int acc = (int)rnd(64), mask = (int)rnd(1 << 21), st = (int)rnd(7), t = (int)rnd(4);
		int len = (int)rnd(5000), use_srq = (int)rnd(2);
		snprintf(id, sizeof id, "rand.%lu.%d", seed, s);
		switch (op) {
		case 0:
			if (pd[i])
				break;
			pd[i] = ibv_alloc_pd(ctx);
			line(id, "alloc_pd[%u] %s", i, pd[i] ? "ok" : ename(errno));
			break;
		case 1:
			if (!pd[i] || i == 0) {
				line(id, "skip");
				break;
			}
			{
				int rc = ibv_dealloc_pd(pd[i]);
				line(id, "dealloc_pd[%u] %s", i, rc ? ename(rc) : "ok");
				if (!rc)
					pd[i] = NULL;
			}
			break;
		case 2:
			if (cq[i]) {
				int rc = ibv_destroy_cq(cq[i]);
				line(id, "destroy_cq[%u] %s", i, rc ? ename(rc) : "ok");
				if (!rc)
					cq[i] = NULL;
			} else {
				cq[i] = ibv_create_cq(ctx, e3, NULL, NULL, 0);
				line(id, "create_cq[%u](%s) %s", i, n3, cq[i] ? "ok" : ename(errno));
			}
			break;
		case 3:
			if (mr[i]) {
				int rc = ibv_dereg_mr(mr[i]);
				line(id, "dereg_mr[%u] %s", i, rc ? ename(rc) : "ok");
				if (!rc)
					mr[i] = NULL;
			} else if (pd[j]) {
				mr[i] = ibv_reg_mr(pd[j], mem[i], len, acc);
				line(id, "reg_mr[%u](pd%u,%d,%s) %s", i, j, len, access_str(acc),
				     mr[i] ? "ok" : ename(errno));
			} else {
				line(id, "skip");
			}
			break;
		case 4:
		case 5:
			if (qp[i]) {
				int rc = ibv_destroy_qp(qp[i]);
				line(id, "destroy_qp[%u] %s", i, rc ? ename(rc) : "ok");
				if (!rc)
					qp[i] = NULL;
			} else if (pd[j] && cq[k]) {
				struct ibv_qp_init_attr ia = {
					.send_cq = cq[k], .recv_cq = cq[k], .srq = use_srq ? srq[j] : NULL,
					.cap = { e1, e1 == 0 ? 0 : 4, e2 > 0 ? 1 : e2, 1, t * 32 },
					.qp_type = t == 0 ? IBV_QPT_UC : t == 1 ? IBV_QPT_UD : IBV_QPT_RC,
				};
				qp[i] = ibv_create_qp(pd[j], &ia);
				if (qp[i])
					line(id, "create_qp[%u](%s,sw=%s) ok cap=%u,%u,%u,%u,%u", i, qpt_name(ia.qp_type), n1,
					     ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge,
					     ia.cap.max_recv_sge, ia.cap.max_inline_data);
				else
					line(id, "create_qp[%u](%s,sw=%s) %s", i, qpt_name(ia.qp_type), n1, ename(errno));
			} else {
				line(id, "skip");
			}
			break;
		case 6:
		case 7:
			if (!qp[i]) {
				line(id, "skip");
				break;
			}
			{
				struct ibv_qp_attr a;
				if (st == IBV_QPS_INIT)
					attr_init(&a, qp[i]->qp_type);
				else if (st == IBV_QPS_RTR)
					attr_rtr(&a, qp[i]->qp_num);
				else if (st == IBV_QPS_RTS)
					attr_rts(&a);
				else {
					memset(&a, 0, sizeof a);
					a.qp_state = st;
				}
				/* half the time the step's own mask, else a random one */
				int m = (mask & 1) ? mask | IBV_QP_STATE :
					st == IBV_QPS_INIT ? mask_init(qp[i]->qp_type) :
					st == IBV_QPS_RTR ? mask_rtr(qp[i]->qp_type) :
					st == IBV_QPS_RTS ? mask_rts(qp[i]->qp_type) : IBV_QP_STATE;
				m &= ~(IBV_QP_CAP | IBV_QP_RATE_LIMIT | IBV_QP_ALT_PATH);
				int rc = ibv_modify_qp(qp[i], &a, m);
				line(id, "modify_qp[%u](to=%d,mask=0x%x) %s state=%d", i, st, m, rc ? ename(rc) : "ok",
				     qp_state(qp[i]));
			}
			break;
		case 8:
			if (srq[i]) {
				int rc = ibv_destroy_srq(srq[i]);
				line(id, "destroy_srq[%u] %s", i, rc ? ename(rc) : "ok");
				if (!rc)
					srq[i] = NULL;
			} else if (pd[j]) {
				struct ibv_srq_init_attr ia = { .attr = { e1, 1, 0 } };
				srq[i] = ibv_create_srq(pd[j], &ia);
				line(id, "create_srq[%u](%s) %s", i, n1, srq[i] ? "ok" : ename(errno));
			} else {
				line(id, "skip");
			}
			break;
		case 9:
			if (mw[i]) {
				int rc = ibv_dealloc_mw(mw[i]);
				line(id, "dealloc_mw[%u] %s", i, rc ? ename(rc) : "ok");
				if (!rc)
					mw[i] = NULL;
			} else if (pd[j]) {
				mw[i] = ibv_alloc_mw(pd[j], t % 3);
				line(id, "alloc_mw[%u](%d) %s", i, t % 3, mw[i] ? "ok" : ename(errno));
			} else {
				line(id, "skip");
			}
			break;
		case 10:
			if (!qp[i] || !mr[j]) {
				line(id, "skip");
				break;
			}
			{
				struct ibv_sge sg = { (uintptr_t)mem[j], (uint32_t)len % 64, mr[j]->lkey };
				struct ibv_recv_wr r = { .sg_list = &sg, .num_sge = 1 }, *bad;
				int rc = ibv_post_recv(qp[i], &r, &bad);
				line(id, "post_recv[%u] %s", i, rc ? ename(rc) : "ok");
			}
			break;
		case 11:
			if (!qp[i] || !mr[j]) {
				line(id, "skip");
				break;
			}
			{
				struct ibv_sge sg = { (uintptr_t)mem[j], (uint32_t)len % 64, mr[j]->lkey };
				struct ibv_send_wr w = { .sg_list = &sg, .num_sge = 1,
							 .opcode = t == 0 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE }, *bad;
				w.wr.rdma.remote_addr = (uintptr_t)mem[j];
				w.wr.rdma.rkey = mr[j]->rkey;
				int rc = qp[i]->qp_type == IBV_QPT_UD ? -2 : ibv_post_send(qp[i], &w, &bad);
				line(id, "post_send[%u] %s", i, rc == -2 ? "skip_ud" : rc ? ename(rc) : "ok");
			}
			break;
		case 12:
			if (!cq[i]) {
				line(id, "skip");
				break;
			}
			{
				struct ibv_wc wc[4];
				int n = ibv_poll_cq(cq[i], 4, wc);
				/* a count only: what is in the CQ by now depends on timing */
				line(id, "poll_cq[%u] %s", i, n < 0 ? "error" : "ok");
			}
			break;
		case 13:
			if (!cq[i]) {
				line(id, "skip");
				break;
			}
			{
				int rc = ibv_resize_cq(cq[i], e3);
				line(id, "resize_cq[%u](%s) %s", i, n3, rc ? ename(rc) : "ok");
			}
			break;
		case 14:
			if (!srq[i]) {
				line(id, "skip");
				break;
			}
			{
				struct ibv_srq_attr a = { .max_wr = e1, .srq_limit = (uint32_t)len % 32 };
				int rc = ibv_modify_srq(srq[i], &a, mask & 3);
				line(id, "modify_srq[%u](%d) %s", i, mask & 3, rc ? ename(rc) : "ok");
			}
			break;
		default:
			if (!qp[i]) {
				line(id, "skip");
				break;
			}
			{
				struct ibv_qp_attr a;
				struct ibv_qp_init_attr qi;
				int rc = ibv_query_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_CAP, &qi);
				line(id, "query_qp[%u] %s state=%d", i, rc ? ename(rc) : "ok", rc ? -1 : (int)a.qp_state);
			}
			break;
		}
	}
	/* tear down in an order that always works */
	for (int i = 0; i < SLOTS; i++)
		if (qp[i])
			ibv_destroy_qp(qp[i]);
	for (int i = 0; i < SLOTS; i++) {
		if (mw[i])
			ibv_dealloc_mw(mw[i]);
		if (mr[i])
			ibv_dereg_mr(mr[i]);
		if (srq[i])
			ibv_destroy_srq(srq[i]);
	}
	for (int i = 0; i < SLOTS; i++)
		if (cq[i])
			ibv_destroy_cq(cq[i]);
	for (int i = 1; i < SLOTS; i++)
		if (pd[i])
			ibv_dealloc_pd(pd[i]);
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[2], "table") && (strcmp(argv[2], "random") || argc < 5))) {
		fprintf(stderr, "usage: %s DEVICE table | DEVICE random SEED STEPS\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	watchdog(strcmp(argv[2], "table") ? 60 : 300);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n), *dev = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "verbs_diff: no device %s\n", argv[1]);
		return 2;
	}
	ctx = ibv_open_device(dev);
	if (!ctx || ibv_query_device(ctx, &dattr) || ibv_query_port(ctx, 1, &pattr)) {
		fprintf(stderr, "verbs_diff: cannot open or query %s\n", argv[1]);
		return 2;
	}
	find_gid();
	if (gidx < 0) {
		fprintf(stderr, "verbs_diff: %s has no RoCE v2 IPv4 GID\n", argv[1]);
		return 2;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!strcmp(argv[2], "random")) {
		unsigned long seed = strtoul(argv[3], NULL, 0);
		int steps = atoi(argv[4]);
		scq = rcq = NULL;
		random_mode(pd, seed, steps);
	} else {
		cases_device(dev);
		cases_mr(pd);
		cases_cq();
		scq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
		rcq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
		struct ibv_srq_init_attr sa = { .attr = { 16, 1, 0 } };
		struct ibv_srq *srq = ibv_create_srq(pd, &sa);
		cases_qp_create(pd, srq);
		cases_qp_modify(pd);
		cases_srq(pd);
		cases_ah(pd);
		cases_mw(pd);
		cases_data(pd);
		cases_import(pd);
		{
			static uint8_t mbuf[1024] __attribute__((aligned(64)));
			struct ibv_mr *mmr = ibv_reg_mr(pd, mbuf, sizeof mbuf, IBV_ACCESS_LOCAL_WRITE);
			cases_mcast(pd, mbuf, mmr);
			ibv_dereg_mr(mmr);
		}
		ibv_destroy_srq(srq);
		ibv_destroy_cq(scq);
		ibv_destroy_cq(rcq);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("END\n");
	return 0;
}
