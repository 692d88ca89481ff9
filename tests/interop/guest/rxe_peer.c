/*
 * rxe_peer.c - the guest (kernel rdma_rxe) side of the rxe-rs interop suite.
 *
 * Its counterpart on the host is tests/interop/peer (Rust, rxe-verbs). The two
 * programs speak the same little protocol and run the same list of steps;
 * one side is the REQUESTER (-R: posts the SENDs, WRITEs, READs, atomics),
 * the other the RESPONDER (-S: posts receives, owns the memory that is
 * written, read and updated). Each side checks what it can see itself
 * (completions, statuses, immediate data, memory byte for byte, counters)
 * and prints one line per step:
 *
 *     RESULT <step> PASS|FAIL <R|S> <detail>
 *
 * Plans (-P):
 *   ops   SEND/WRITE with immediate (one packet and multi-packet), a 64 KiB
 *         SEND, WRITE and READ, fetch-and-add, compare-and-swap (hit and
 *         miss), RNR NAK and retry, a WRITE with a bad rkey (NAK remote
 *         access error) and a SEND longer than the posted receive.
 *   loss  8 x 64 KiB SENDs, WRITEs and READs, all posted at once, checked
 *         byte for byte (the harness drops a few frames on the bridge).
 *   ucud  QP 0 is UC, QP 1 UD (QP 2 stays RC): SEND with immediate (one
 *         packet and multi-packet) and WRITE with immediate (the same) on UC,
 *         SEND with and without immediate on UD (Q_Key 0x11111111, the
 *         receiver finds the 40-byte GRH area before the data), then one
 *         RC SEND with immediate on QP 2 (so that the responder sends too).
 *   ext   IBTA 1.5's RC ATOMIC WRITE and FLUSH, which kernels from 6.2 on
 *         perform (this side is the responder only: rdma-core 44 has no
 *         ibv_wr_flush): an ATOMIC WRITE checked in memory, FLUSHes of a
 *         range, the whole region and 0 bytes, then one asking for
 *         persistence the QP does not allow (QP 1: NAK invalid request)
 *         and one with a bad rkey (QP 2: NAK remote access error). The
 *         region and the QPs allow FLUSH_GLOBAL (256, rdma-core 45's
 *         IBV_ACCESS_FLUSH_GLOBAL).
 *
 * Out of band (TCP, default port 18516): each side sends one text line
 *   RXEPEER1 role=R impl=kernel plan=ops mtu=1024 gid=<32 hex> addr=<hex>
 *            rkey=<hex> qpn=<hex>,<hex>,<hex> psn=<hex>,<hex>,<hex>
 * then, per step, "S <step>" (both sides are ready) and a result line
 * "R <step> PASS|FAIL" (the requester's first, so that the responder checks
 * its memory only after the requester's operations completed).
 *
 * Data: every message is a xorshift32 byte stream seeded per step
 * (pattern() below; the Rust side has the same function). Unused bytes
 * around every target are 0xEE guards, checked after each step.
 *
 * Usage:  rxe_peer -R|-S [-P ops|loss|ucud|ext] [-d rxe0] [-g 1] [-m 1024] [-p 18516]
 *                  [-t seconds] [server_ipv4]
 * Build:  gcc -O2 -Wall -o rxe_peer rxe_peer.c -libverbs
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MR_LEN (4u << 20)
#define NQP 3
#define GUARD 0xEE

/* buffer layout (same on both sides) */
#define OFF_SRC      0x000000u /* requester: what it sends / writes */
#define OFF_RECV     0x010000u /* responder: receive buffer (128 KiB) */
#define OFF_SHORT    0x030000u /* responder: the too-short receive */
#define OFF_WRITE    0x040000u /* responder: WRITE target */
#define OFF_READSRC  0x060000u /* responder: READ source */
#define OFF_READDST  0x080000u /* requester: READ destination */
#define OFF_BADW     0x0a0000u /* responder: target of the bad-rkey WRITE */
#define OFF_ATOMIC   0x0f0000u /* responder: the 8-byte atomic word */
#define OFF_ATRES    0x0f0100u /* requester: atomic result */
#define OFF_LOSS_S   0x100000u /* loss: responder buffers, 8 x 64 KiB */
#define OFF_LOSS_R   0x200000u /* loss: requester buffers, 8 x 64 KiB */
#define LOSS_N 8
#define LOSS_LEN 65536u

#define ACCESS_FLUSH_GLOBAL 256 /* rdma-core 45's IBV_ACCESS_FLUSH_GLOBAL */
#define MIN_RNR_TIMER 24       /* 40.96 ms */
#define UD_QKEY 0x11111111u
#define GRH_LEN 40
#define RNR_HOLD_MS 800        /* how long the responder keeps its RQ empty */

static const char *dev_name = "rxe0";
static int gidx = 1, port = 18516, timeout_s = 30;
static unsigned mtu_bytes = 1024;
static char role;              /* 'R' or 'S' */
static const char *plan = "ops";

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static struct ibv_qp *qp[NQP];
static struct ibv_ah *ud_ah;   /* ucud plan: to the peer's QP 1 */
static int step_q;             /* the QP step_send/step_write use (0 but in ucud) */
static uint8_t *buf;
static int sock;
static int failures;

struct peer {
	char role, impl[16], plan[16];
	unsigned mtu;
	uint8_t gid[16];
	unsigned long long addr;
	unsigned rkey, qpn[NQP], psn[NQP];
};
static struct peer me, them;

#define die(...) do { fprintf(stderr, "rxe_peer: " __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

/* ---- data pattern: xorshift32, shared with the Rust side ------------------ */
static uint32_t seed_state(uint32_t seed)
{
	uint32_t x = seed * 2654435761u;
	return x ? x : 0x9e3779b9u;
}
static void pattern(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed_state(seed);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}
/* index of the first byte that differs from the pattern, or -1 */
static long check_pattern(const uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed_state(seed);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		if (p[i] != (uint8_t)x) return (long)i;
	}
	return -1;
}
static long check_guard(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != GUARD) return (long)i;
	return -1;
}

/* ---- counters (the kernel's rxe hw_counters) ------------------------------ */
static const char *cnames[] = {
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
	"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
	"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "rdma_sends", "rdma_recvs",
};
#define NCNT (sizeof cnames / sizeof cnames[0])
enum { C_RCVD_RNR = 4, C_SEND_RNR = 5 };
static void read_counters(unsigned long long *v)
{
	char path[256];
	for (size_t i = 0; i < NCNT; i++) {
		snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev_name, cnames[i]);
		FILE *f = fopen(path, "r");
		v[i] = 0;
		if (f) {
			if (fscanf(f, "%llu", &v[i]) != 1) v[i] = 0;
			fclose(f);
		}
	}
}
static void print_counter_delta(const char *what, unsigned long long *a, unsigned long long *b)
{
	printf("  %s counters:", what);
	for (size_t i = 0; i < NCNT; i++)
		if (b[i] != a[i]) printf(" %s+%llu", cnames[i], b[i] - a[i]);
	printf("\n");
}

/* ---- out-of-band channel: text lines over TCP ----------------------------- */
static void send_line(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	if (write(sock, line, n) != n) die("out-of-band write: %s", strerror(errno));
}
static void recv_line(char *line, size_t max)
{
	size_t n = 0;
	for (;;) {
		char c;
		ssize_t r = read(sock, &c, 1);
		if (r <= 0) die("out-of-band read: peer closed the connection");
		if (c == '\n') break;
		if (n + 1 < max) line[n++] = c;
	}
	line[n] = 0;
}
/* both sides say "S <step>" and wait for the other's */
static void sync_step(const char *step)
{
	char line[256], want[256];
	send_line("S %s", step);
	recv_line(line, sizeof line);
	snprintf(want, sizeof want, "S %s", step);
	if (strcmp(line, want)) die("out of step: expected \"%s\", got \"%s\"", want, line);
}

/* ---- completions ---------------------------------------------------------- */
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
/* collects n completions (or fewer at the deadline); returns how many */
static int wait_wc(struct ibv_wc *wc, int n, double seconds)
{
	int got = 0;
	double end = now() + seconds;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0) die("ibv_poll_cq failed");
		got += r;
		if (got >= n) break;
		if (now() > end) break;
		usleep(200);
	}
	return got;
}
static const char *opname(enum ibv_wc_opcode o)
{
	switch (o) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "?";
	}
}
static void print_wc(const char *who, struct ibv_wc *w)
{
	printf("  %s wc: qp 0x%06x wr_id %llu status %s opcode %s byte_len %u",
	       who, w->qp_num, (unsigned long long)w->wr_id, ibv_wc_status_str(w->status),
	       w->status == IBV_WC_SUCCESS ? opname(w->opcode) : "-", w->byte_len);
	if (w->status == IBV_WC_SUCCESS && (w->opcode & IBV_WC_RECV) && (w->wc_flags & IBV_WC_WITH_IMM))
		printf(" imm 0x%08x", ntohl(w->imm_data));
	printf("\n");
}

/* ---- per-step verdicts ---------------------------------------------------- */
static char detail[1024];
static int step_ok;
static void fail(const char *fmt, ...)
{
	size_t n = strlen(detail);
	va_list ap;
	if (n && n < sizeof detail - 2) { detail[n++] = ';'; detail[n++] = ' '; detail[n] = 0; }
	va_start(ap, fmt);
	vsnprintf(detail + n, sizeof detail - n, fmt, ap);
	va_end(ap);
	step_ok = 0;
}
static void note(const char *fmt, ...)
{
	size_t n = strlen(detail);
	va_list ap;
	if (n && n < sizeof detail - 2) { detail[n++] = ';'; detail[n++] = ' '; detail[n] = 0; }
	va_start(ap, fmt);
	vsnprintf(detail + n, sizeof detail - n, fmt, ap);
	va_end(ap);
}

/* ---- posting ---------------------------------------------------------------- */
static int is_ud(int q) { return qp[q]->qp_type == IBV_QPT_UD; }
static void post_recv(int q, uint32_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)buf + off, len, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp[q], &wr, &bad)) die("ibv_post_recv failed");
}
static void post_send(int q, uint64_t id, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		      uint32_t imm, uint64_t raddr, uint32_t rkey, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_sge sge = { (uintptr_t)buf + off, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.imm_data = htonl(imm);
	if (is_ud(q)) {
		wr.wr.ud.ah = ud_ah;
		wr.wr.ud.remote_qpn = them.qpn[q];
		wr.wr.ud.remote_qkey = UD_QKEY;
	} else if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = cmp_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(qp[q], &wr, &bad)) die("ibv_post_send failed");
}

/* requester: wait for one send completion and check its status/opcode */
static void req_expect(const char *what, enum ibv_wc_status st, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	if (wait_wc(&wc, 1, timeout_s) != 1) { fail("%s: no completion within %ds", what, timeout_s); return; }
	print_wc("requester", &wc);
	if (wc.status != st)
		fail("%s: status %s, expected %s", what, ibv_wc_status_str(wc.status), ibv_wc_status_str(st));
	else if (st == IBV_WC_SUCCESS && wc.opcode != op)
		fail("%s: opcode %s, expected %s", what, opname(wc.opcode), opname(op));
}

/* responder: wait for one receive completion and check it */
static void resp_expect_recv(const char *what, enum ibv_wc_opcode op, uint32_t len, int has_imm, uint32_t imm)
{
	struct ibv_wc wc;
	if (wait_wc(&wc, 1, timeout_s) != 1) { fail("%s: no receive completion within %ds", what, timeout_s); return; }
	print_wc("responder", &wc);
	if (wc.status != IBV_WC_SUCCESS) { fail("%s: status %s", what, ibv_wc_status_str(wc.status)); return; }
	if (wc.opcode != op) fail("%s: opcode %s, expected %s", what, opname(wc.opcode), opname(op));
	if (wc.byte_len != len) fail("%s: byte_len %u, expected %u", what, wc.byte_len, len);
	int got_imm = !!(wc.wc_flags & IBV_WC_WITH_IMM);
	if (got_imm != has_imm) fail("%s: %s immediate data", what, got_imm ? "unexpected" : "no");
	else if (has_imm && ntohl(wc.imm_data) != imm)
		fail("%s: imm 0x%08x, expected 0x%08x", what, ntohl(wc.imm_data), imm);
}
static void check_region(const char *what, uint32_t off, uint32_t len, uint32_t seed, uint32_t guard_len)
{
	long bad = check_pattern(buf + off, len, seed);
	if (bad >= 0) fail("%s: data differs at byte %ld of %u", what, bad, len);
	if (guard_len && (bad = check_guard(buf + off + len, guard_len)) >= 0)
		fail("%s: byte %ld past the end was written", what, bad);
}
static uint64_t get_u64(uint32_t off) { uint64_t v; memcpy(&v, buf + off, 8); return v; }
static void set_u64(uint32_t off, uint64_t v) { memcpy(buf + off, &v, 8); }

/* ---- steps -------------------------------------------------------------------- */
static int peer_is_kernel(void) { return !strcmp(them.impl, "kernel"); }

/* ends a step: exchange verdicts (requester first), print RESULT */
static void finish(const char *step, void (*resp_after)(void))
{
	char line[256], peer_v[16] = "";
	if (role == 'R') {
		send_line("R %s %s", step, step_ok ? "PASS" : "FAIL");
		recv_line(line, sizeof line);
	} else {
		recv_line(line, sizeof line);     /* the requester is done: memory is final */
		if (resp_after) resp_after();
		send_line("R %s %s", step, step_ok ? "PASS" : "FAIL");
	}
	sscanf(line, "R %*s %15s", peer_v);
	printf("RESULT %s %s %c %s%s(peer: %s)\n", step, step_ok ? "PASS" : "FAIL", role,
	       detail, detail[0] ? " " : "", peer_v);
	fflush(stdout);
	if (!step_ok) failures++;
}
static void begin(const char *step)
{
	detail[0] = 0;
	step_ok = 1;
	printf("--- %s (%s)\n", step, role == 'R' ? "requester" : "responder");
	fflush(stdout);
}

static struct { uint32_t off, len, seed; } pending_check;
static void check_pending(void)
{
	check_region("memory", pending_check.off, pending_check.len, pending_check.seed, 256);
}

/* SEND (with or without immediate) of len bytes on QP 0 */
static void step_send(const char *step, uint32_t len, int imm_on, uint32_t imm, uint32_t seed)
{
	begin(step);
	if (role == 'S') {
		/* UD: the first 40 bytes take the GRH (rxe writes the IPv4 header
		 * into the last 20 of them) */
		uint32_t grh = is_ud(step_q) ? GRH_LEN : 0;
		memset(buf + OFF_RECV, GUARD, 0x20000);
		post_recv(step_q, OFF_RECV, 0x20000 - 256, 1);
		sync_step(step);
		resp_expect_recv(step, IBV_WC_RECV, len + grh, imm_on, imm);
		check_region("received data", OFF_RECV + grh, len, seed, 256);
	} else {
		pattern(buf + OFF_SRC, len, seed);
		sync_step(step);
		post_send(step_q, 2, imm_on ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, OFF_SRC, len, imm, 0, 0, 0, 0);
		req_expect(step, IBV_WC_SUCCESS, IBV_WC_SEND);
	}
	finish(step, NULL);
}

/* RDMA WRITE (with immediate: the responder consumes a receive) */
static void step_write(const char *step, uint32_t len, int imm_on, uint32_t imm, uint32_t seed)
{
	begin(step);
	if (role == 'S') {
		memset(buf + OFF_WRITE, GUARD, 0x10000 + 256);
		if (imm_on) post_recv(step_q, OFF_RECV, 64, 3);
		sync_step(step);
		if (imm_on) resp_expect_recv(step, IBV_WC_RECV_RDMA_WITH_IMM, len, 1, imm);
		pending_check.off = OFF_WRITE; pending_check.len = len; pending_check.seed = seed;
		finish(step, check_pending);
		return;
	}
	pattern(buf + OFF_SRC, len, seed);
	sync_step(step);
	post_send(step_q, 4, imm_on ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, OFF_SRC, len, imm,
		  them.addr + OFF_WRITE, them.rkey, 0, 0);
	req_expect(step, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	finish(step, NULL);
}

static void step_read(const char *step, uint32_t len, uint32_t seed)
{
	begin(step);
	if (role == 'S') {
		pattern(buf + OFF_READSRC, len, seed);
		sync_step(step);
	} else {
		memset(buf + OFF_READDST, GUARD, len + 256);
		sync_step(step);
		post_send(0, 5, IBV_WR_RDMA_READ, OFF_READDST, len, 0, them.addr + OFF_READSRC, them.rkey, 0, 0);
		req_expect(step, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
		check_region("read data", OFF_READDST, len, seed, 256);
	}
	finish(step, NULL);
}

static uint64_t atomic_expect_mem;
static void check_atomic_mem(void)
{
	uint64_t v = get_u64(OFF_ATOMIC);
	if (v != atomic_expect_mem)
		fail("memory 0x%016llx, expected 0x%016llx", (unsigned long long)v, (unsigned long long)atomic_expect_mem);
	else
		note("memory 0x%016llx", (unsigned long long)v);
}
/* initial < 0: leave the word as it is */
static void step_atomic(const char *step, int fetch_add, int set_initial, uint64_t initial,
			uint64_t cmp_add, uint64_t swap, uint64_t want_old, uint64_t want_mem)
{
	begin(step);
	if (role == 'S') {
		if (set_initial) set_u64(OFF_ATOMIC, initial);
		sync_step(step);
		atomic_expect_mem = want_mem;
		finish(step, check_atomic_mem);
		return;
	}
	set_u64(OFF_ATRES, 0x5555555555555555ull);
	sync_step(step);
	post_send(0, 6, fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP, OFF_ATRES, 8, 0,
		  them.addr + OFF_ATOMIC, them.rkey, cmp_add, swap);
	req_expect(step, IBV_WC_SUCCESS, fetch_add ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
	uint64_t old = get_u64(OFF_ATRES);
	if (old != want_old)
		fail("returned 0x%016llx, expected 0x%016llx", (unsigned long long)old, (unsigned long long)want_old);
	else
		note("returned 0x%016llx", (unsigned long long)old);
	finish(step, NULL);
}

static void step_rnr(const char *step)
{
	unsigned long long c0[NCNT], c1[NCNT];
	begin(step);
	read_counters(c0);
	if (role == 'S') {
		memset(buf + OFF_RECV, GUARD, 1024);
		sync_step(step);           /* no receive posted: the SEND gets RNR NAKs */
		usleep(RNR_HOLD_MS * 1000);
		post_recv(0, OFF_RECV, 512, 7);
		resp_expect_recv(step, IBV_WC_RECV, 64, 0, 0);
		check_region("received data", OFF_RECV, 64, 77, 256);
		read_counters(c1);
		print_counter_delta("responder", c0, c1);
		if (c1[C_SEND_RNR] == c0[C_SEND_RNR]) fail("send_rnr_err did not grow");
		else note("%llu RNR NAKs sent", c1[C_SEND_RNR] - c0[C_SEND_RNR]);
	} else {
		pattern(buf + OFF_SRC, 64, 77);
		sync_step(step);
		double t0 = now();
		post_send(0, 8, IBV_WR_SEND, OFF_SRC, 64, 0, 0, 0, 0, 0);
		req_expect(step, IBV_WC_SUCCESS, IBV_WC_SEND);
		double dt = now() - t0;
		read_counters(c1);
		print_counter_delta("requester", c0, c1);
		if (c1[C_RCVD_RNR] == c0[C_RCVD_RNR]) fail("rcvd_rnr_err did not grow");
		else note("%llu RNR NAKs received, completed after %.0f ms", c1[C_RCVD_RNR] - c0[C_RCVD_RNR], dt * 1000);
	}
	finish(step, NULL);
}

static const char *state_name(enum ibv_qp_state s)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	return (unsigned)s < 7 ? n[s] : "?";
}
static void note_qp_state(int q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp[q], &a, IBV_QP_STATE, &ia) == 0) note("QP%d %s", q, state_name(a.qp_state));
}
static void check_badw(void)
{
	long bad = check_guard(buf + OFF_BADW, 4096);
	if (bad >= 0) fail("byte %ld of the target was written", bad);
	note_qp_state(1);
}
static void step_bad_rkey(const char *step)
{
	begin(step);
	if (role == 'S') {
		memset(buf + OFF_BADW, GUARD, 4096);
		sync_step(step);
		finish(step, check_badw);
		return;
	}
	pattern(buf + OFF_SRC, 64, 88);
	sync_step(step);
	post_send(1, 9, IBV_WR_RDMA_WRITE, OFF_SRC, 64, 0, them.addr + OFF_BADW, them.rkey ^ 0x5a5a00, 0, 0);
	req_expect(step, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE);
	note_qp_state(1);
	finish(step, NULL);
}

/* ext plan, responder: the requester's ATOMIC WRITE stores want_mem */
static void step_atomic_write(const char *step, uint64_t initial, uint64_t want_mem)
{
	begin(step);
	set_u64(OFF_ATOMIC, initial);
	sync_step(step);
	atomic_expect_mem = want_mem;
	finish(step, check_atomic_mem);
}
/* ext plan, responder: a FLUSH on QP q changes no byte; says the QP's state */
static int flush_q;
static void check_flush(void)
{
	long bad = check_guard(buf + OFF_BADW, 4096);
	if (bad >= 0) fail("byte %ld of the guard was written", bad);
	note_qp_state(flush_q);
}
static void step_flush(const char *step, int q)
{
	begin(step);
	memset(buf + OFF_BADW, GUARD, 4096);
	flush_q = q;
	sync_step(step);
	finish(step, check_flush);
}

/* the kernel's rxe answers a SEND longer than the receive with NAK "remote
 * operational error"; rxe-rs (like the spec) with NAK "invalid request" */
static void step_too_long(const char *step)
{
	begin(step);
	if (role == 'S') {
		memset(buf + OFF_SHORT, GUARD, 4096);
		post_recv(2, OFF_SHORT, 256, 10);
		sync_step(step);
		struct ibv_wc wc;
		if (wait_wc(&wc, 1, timeout_s) != 1) {
			fail("no completion for the receive");
		} else {
			print_wc("responder", &wc);
			/* the kernel's rxe: IBV_WC_LOC_QP_OP_ERR (the spec: LOC_LEN_ERR) */
			note("receive completed with %s", ibv_wc_status_str(wc.status));
			if (wc.status != IBV_WC_LOC_QP_OP_ERR)
				fail("receive status %s, expected (the kernel's) %s", ibv_wc_status_str(wc.status),
				     ibv_wc_status_str(IBV_WC_LOC_QP_OP_ERR));
		}
		long bad = check_guard(buf + OFF_SHORT + 256, 4096 - 256);
		if (bad >= 0) fail("byte %ld past the 256-byte receive was written", bad + 256);
		note_qp_state(2);
		finish(step, NULL);
		return;
	}
	pattern(buf + OFF_SRC, 1000, 99);
	sync_step(step);
	post_send(2, 11, IBV_WR_SEND, OFF_SRC, 1000, 0, 0, 0, 0, 0);
	req_expect(step, peer_is_kernel() ? IBV_WC_REM_OP_ERR : IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND);
	note_qp_state(2);
	finish(step, NULL);
}

/* ---- loss plan ------------------------------------------------------------------ */
static void loss_check(const char *what, uint32_t base, uint32_t seed0)
{
	for (int i = 0; i < LOSS_N; i++) {
		long bad = check_pattern(buf + base + i * LOSS_LEN, LOSS_LEN, seed0 + i);
		if (bad >= 0) fail("%s %d: data differs at byte %ld", what, i, bad);
	}
}

static void loss_step(const char *step, enum ibv_wr_opcode op, uint32_t seed0)
{
	struct ibv_wc wc[LOSS_N];
	unsigned long long c0[NCNT], c1[NCNT];
	begin(step);
	read_counters(c0);
	if (role == 'S') {
		memset(buf + OFF_LOSS_S, GUARD, LOSS_N * LOSS_LEN);
		if (op == IBV_WR_SEND)
			for (int i = 0; i < LOSS_N; i++) post_recv(0, OFF_LOSS_S + i * LOSS_LEN, LOSS_LEN, 100 + i);
		if (op == IBV_WR_RDMA_READ)
			for (int i = 0; i < LOSS_N; i++) pattern(buf + OFF_LOSS_S + i * LOSS_LEN, LOSS_LEN, seed0 + i);
		sync_step(step);
		if (op == IBV_WR_SEND) {
			int n = wait_wc(wc, LOSS_N, 2 * timeout_s);
			if (n != LOSS_N) fail("%d of %d receives completed", n, LOSS_N);
			for (int i = 0; i < n; i++)
				if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != LOSS_LEN || wc[i].wr_id != 100u + i) {
					print_wc("responder", &wc[i]);
					fail("receive %d: %s, %u bytes, wr_id %llu", i, ibv_wc_status_str(wc[i].status),
					     wc[i].byte_len, (unsigned long long)wc[i].wr_id);
				}
			loss_check("receive", OFF_LOSS_S, seed0);
		}
		char line[256];
		recv_line(line, sizeof line);  /* the requester is done: memory is final */
		if (op == IBV_WR_RDMA_WRITE) loss_check("write", OFF_LOSS_S, seed0);
		read_counters(c1);
		print_counter_delta("responder", c0, c1);
		send_line("R %s %s", step, step_ok ? "PASS" : "FAIL");
		printf("RESULT %s %s %c %s\n", step, step_ok ? "PASS" : "FAIL", role, detail);
		fflush(stdout);
		if (!step_ok) failures++;
		return;
	}
	if (op == IBV_WR_RDMA_READ)
		memset(buf + OFF_LOSS_R, GUARD, LOSS_N * LOSS_LEN);
	else
		for (int i = 0; i < LOSS_N; i++) pattern(buf + OFF_LOSS_R + i * LOSS_LEN, LOSS_LEN, seed0 + i);
	sync_step(step);
	double t0 = now();
	for (int i = 0; i < LOSS_N; i++)
		post_send(0, 200 + i, op, OFF_LOSS_R + i * LOSS_LEN, LOSS_LEN, 0,
			  them.addr + OFF_LOSS_S + i * LOSS_LEN, them.rkey, 0, 0);
	int n = wait_wc(wc, LOSS_N, 2 * timeout_s);
	if (n != LOSS_N) fail("%d of %d work requests completed", n, LOSS_N);
	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS) {
			print_wc("requester", &wc[i]);
			fail("wr %d: %s", i, ibv_wc_status_str(wc[i].status));
		}
	if (op == IBV_WR_RDMA_READ) loss_check("read", OFF_LOSS_R, seed0);
	note("%d x %u bytes in %.0f ms", LOSS_N, LOSS_LEN, (now() - t0) * 1000);
	read_counters(c1);
	print_counter_delta("requester", c0, c1);
	char line[256];
	send_line("R %s %s", step, step_ok ? "PASS" : "FAIL");
	recv_line(line, sizeof line);
	printf("RESULT %s %s %c %s\n", step, step_ok ? "PASS" : "FAIL", role, detail);
	fflush(stdout);
	if (!step_ok) failures++;
}

/* ---- setup ---------------------------------------------------------------------- */
static enum ibv_mtu mtu_enum(unsigned b)
{
	switch (b) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	die("bad MTU %u", b);
}

static void connect_qp(int q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	if (is_ud(q)) {
		if (ibv_modify_qp(qp[q], &a, IBV_QP_STATE)) die("modify UD QP%d to RTR: %s", q, strerror(errno));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = me.psn[q];
		if (ibv_modify_qp(qp[q], &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
			die("modify UD QP%d to RTS: %s", q, strerror(errno));
		struct ibv_ah_attr ah = { .is_global = 1, .port_num = 1 };
		memcpy(ah.grh.dgid.raw, them.gid, 16);
		ah.grh.sgid_index = gidx;
		ah.grh.hop_limit = 64;
		if (!(ud_ah = ibv_create_ah(pd, &ah))) die("create_ah: %s", strerror(errno));
		return;
	}
	int uc = qp[q]->qp_type == IBV_QPT_UC;
	a.path_mtu = mtu_enum(mtu_bytes);
	a.dest_qp_num = them.qpn[q];
	a.rq_psn = them.psn[q];
	a.max_dest_rd_atomic = LOSS_N;
	a.min_rnr_timer = MIN_RNR_TIMER;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, them.gid, 16);
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp[q], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | (uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		die("modify QP%d to RTR: %s", q, strerror(errno));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me.psn[q];
	a.max_rd_atomic = LOSS_N;
	if (ibv_modify_qp(qp[q], &a, uc ? IBV_QP_STATE | IBV_QP_SQ_PSN :
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP%d to RTS: %s", q, strerror(errno));
}

static void open_oob(const char *server)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (!server) {
		int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		sa.sin_addr.s_addr = INADDR_ANY;
		if (bind(ls, (void *)&sa, sizeof sa) || listen(ls, 1)) die("listen on %d: %s", port, strerror(errno));
		printf("listening on TCP %d\n", port);
		fflush(stdout);
		sock = accept(ls, NULL, NULL);
		close(ls);
		if (sock < 0) die("accept: %s", strerror(errno));
		return;
	}
	if (inet_pton(AF_INET, server, &sa.sin_addr) != 1) die("bad server address %s", server);
	for (int i = 0; i < 100; i++) {   /* the server may not listen yet: 10 s */
		sock = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(sock, (void *)&sa, sizeof sa) == 0) return;
		close(sock);
		usleep(100000);
	}
	die("connect %s:%d: %s", server, port, strerror(errno));
}

static void hex_gid(char *out, const uint8_t *g)
{
	for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", g[i]);
}

static void exchange(void)
{
	char line[512], gid[33], pgid[40] = "";
	hex_gid(gid, me.gid);
	send_line("RXEPEER1 role=%c impl=kernel plan=%s mtu=%u gid=%s addr=%llx rkey=%x qpn=%x,%x,%x psn=%x,%x,%x",
		  role, plan, mtu_bytes, gid, me.addr, me.rkey, me.qpn[0], me.qpn[1], me.qpn[2],
		  me.psn[0], me.psn[1], me.psn[2]);
	recv_line(line, sizeof line);
	if (sscanf(line, "RXEPEER1 role=%c impl=%15s plan=%15s mtu=%u gid=%39s addr=%llx rkey=%x qpn=%x,%x,%x psn=%x,%x,%x",
		   &them.role, them.impl, them.plan, &them.mtu, pgid, &them.addr, &them.rkey,
		   &them.qpn[0], &them.qpn[1], &them.qpn[2], &them.psn[0], &them.psn[1], &them.psn[2]) != 13)
		die("bad peer line: %s", line);
	if (strlen(pgid) != 32) die("bad peer GID %s", pgid);
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(pgid + 2 * i, "%2x", &v);
		them.gid[i] = v;
	}
	if (them.role == role) die("both sides are %c", role);
	if (strcmp(them.plan, plan)) die("plans differ: %s here, %s there", plan, them.plan);
	if (them.mtu != mtu_bytes) die("path MTUs differ: %u here, %u there", mtu_bytes, them.mtu);
	printf("local  %s qpn 0x%06x,0x%06x,0x%06x psn 0x%06x,0x%06x,0x%06x gid %s addr 0x%llx rkey 0x%x\n",
	       "kernel", me.qpn[0], me.qpn[1], me.qpn[2], me.psn[0], me.psn[1], me.psn[2], gid, me.addr, me.rkey);
	printf("remote %s qpn 0x%06x,0x%06x,0x%06x psn 0x%06x,0x%06x,0x%06x gid %s addr 0x%llx rkey 0x%x\n",
	       them.impl, them.qpn[0], them.qpn[1], them.qpn[2], them.psn[0], them.psn[1], them.psn[2], pgid,
	       them.addr, them.rkey);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int opt;
	const char *server = NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "RSP:d:g:m:p:t:")) != -1) {
		switch (opt) {
		case 'R': role = 'R'; break;
		case 'S': role = 'S'; break;
		case 'P': plan = optarg; break;
		case 'd': dev_name = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'm': mtu_bytes = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 't': timeout_s = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -R|-S [-P ops|loss|ucud|ext] [-d dev] [-g gid_index] [-m mtu] [-p port] [-t s] [server]\n", argv[0]);
			return 2;
		}
	}
	if (!role) die("say -R (requester) or -S (responder)");
	if (strcmp(plan, "ops") && strcmp(plan, "loss") && strcmp(plan, "ucud") && strcmp(plan, "ext"))
		die("unknown plan %s", plan);
	int ext = !strcmp(plan, "ext");
	if (ext && role != 'S') die("plan ext: this side is the responder only");
	if (optind < argc) server = argv[optind];

	struct ibv_device **list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name)) ctx = ibv_open_device(list[i]);
	if (!ctx) die("no device %s", dev_name);
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa)) die("query_port");
	printf("device %s active_mtu %d (enum), path MTU %u\n", dev_name, pa.active_mtu, mtu_bytes);
	if (!(pd = ibv_alloc_pd(ctx))) die("alloc_pd");
	if (!(cq = ibv_create_cq(ctx, 256, NULL, NULL, 0))) die("create_cq");
	if (!(buf = aligned_alloc(4096, MR_LEN))) die("malloc");
	memset(buf, GUARD, MR_LEN);
	mr = ibv_reg_mr(pd, buf, MR_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			(ext ? ACCESS_FLUSH_GLOBAL : 0));
	if (!mr) die("reg_mr: %s", strerror(errno));
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid)) die("query_gid %d", gidx);
	memcpy(me.gid, gid.raw, 16);
	me.addr = (uintptr_t)buf;
	me.rkey = mr->rkey;
	srand48(getpid() ^ time(NULL));
	int ucud = !strcmp(plan, "ucud");
	for (int q = 0; q < NQP; q++) {
		enum ibv_qp_type t = ucud && q == 0 ? IBV_QPT_UC : ucud && q == 1 ? IBV_QPT_UD : IBV_QPT_RC;
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = t,
			.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 } };
		if (!(qp[q] = ibv_create_qp(pd, &ia))) die("create_qp: %s", strerror(errno));
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
		int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		if (ext)
			a.qp_access_flags |= ACCESS_FLUSH_GLOBAL;
		if (t == IBV_QPT_UC)
			a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		if (t == IBV_QPT_UD) {
			a.qkey = UD_QKEY;
			mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		}
		if (ibv_modify_qp(qp[q], &a, mask))
			die("modify QP to INIT");
		me.qpn[q] = qp[q]->qp_num;
		me.psn[q] = lrand48() & 0xffffff;
	}

	open_oob(server);
	exchange();
	for (int q = 0; q < NQP; q++) connect_qp(q);
	sync_step("connected");

	if (!strcmp(plan, "ops")) {
		step_send("send_imm_1pkt", 256, 1, 0x12345678, 1);
		step_send("send_imm_multi", 5000, 1, 0x9abcdef0, 2);
		step_send("send_64k", 65536, 0, 0, 3);
		step_write("write_imm_1pkt", 256, 1, 0x0badcafe, 4);
		step_write("write_imm_multi", 5000, 1, 0xfeedf00d, 5);
		step_write("write_64k", 65536, 0, 0, 6);
		step_read("read_64k", 65536, 7);
		step_atomic("fetch_add", 1, 1, 0x1111111111111111ull, 0x0101010101010101ull, 0,
			    0x1111111111111111ull, 0x1212121212121212ull);
		step_atomic("cmp_swap_hit", 0, 0, 0, 0x1212121212121212ull, 0x0123456789abcdefull,
			    0x1212121212121212ull, 0x0123456789abcdefull);
		step_atomic("cmp_swap_miss", 0, 0, 0, 0x1ull, 0x2ull,
			    0x0123456789abcdefull, 0x0123456789abcdefull);
		step_rnr("rnr_retry");
		step_bad_rkey("bad_rkey");
		step_too_long("too_long_send");
	} else if (ext) {
		step_atomic_write("atomic_write", 0x1111111111111111ull, 0x0123456789abcdefull);
		step_flush("flush_range", 0);
		step_flush("flush_region", 0);
		step_flush("flush_zero_len", 0);
		step_flush("flush_persistent_refused", 1);
		step_flush("flush_bad_rkey", 2);
	} else if (ucud) {
		step_q = 0;
		step_send("uc_send_imm_1pkt", 256, 1, 0x0c0ffee1, 11);
		step_send("uc_send_imm_multi", 5000, 1, 0x0c0ffee2, 12);
		step_write("uc_write_imm_1pkt", 256, 1, 0x0c0ffee3, 13);
		step_write("uc_write_imm_multi", 5000, 1, 0x0c0ffee4, 14);
		step_q = 1;
		step_send("ud_send_imm", 256, 1, 0x0dd0beef, 15);
		step_send("ud_send", 1000, 0, 0, 16);
		step_q = 2;   /* an RC SEND after them: the responder answers (ACK) */
		step_send("rc_send_after", 64, 1, 0x0a0b0c0d, 17);
	} else {
		loss_step("loss_send", IBV_WR_SEND, 100);
		loss_step("loss_write", IBV_WR_RDMA_WRITE, 200);
		loss_step("loss_read", IBV_WR_RDMA_READ, 300);
	}
	sync_step("end");
	unsigned long long c[NCNT];
	read_counters(c);
	printf("COUNTERS impl=kernel");
	for (size_t i = 0; i < NCNT; i++) printf(" %s=%llu", cnames[i], c[i]);
	printf("\n");
	printf("DONE %s failures=%d\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
