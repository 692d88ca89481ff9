/*
 * verbs_threads: many threads of one C program on the drop-in
 * libibverbs.so.1 of rxe-rs at once, for ThreadSanitizer (tests/tsan.sh
 * builds the library with -Zsanitizer=thread and this program with
 * -fsanitize=thread, and fails on any report). It also checks what it
 * can see: every byte of every message, completions in order, no lost
 * completion channel event, nothing left on a descriptor.
 *
 * One process, two soft devices (RXE_DEVICES=rxe0=ADDR0,rxe1=ADDR1).
 *
 *   traffic   three RC pairs rxe0 -> rxe1, a sender thread each (posting
 *             and polling its send CQ); the receive CQs of two pairs on
 *             one completion channel, served by an event thread
 *             (ibv_get_cq_event, ibv_ack_cq_events, ibv_req_notify_cq,
 *             ibv_poll_cq, ibv_post_recv); the third polled by a thread of
 *             its own; an async thread polling both async_fds
 *             (ibv_get_async_event, ibv_ack_async_event); a churn thread
 *             creating and destroying CQs on the same channel (armed) and
 *             QPs, moving QPs to the error state; a query thread.
 *   destroy   a pair whose sender keeps posting while the main thread
 *             moves the receiving QP to the error state, destroys it and
 *             its CQ (on the event thread's channel, armed, perhaps with an
 *             event queued), then destroys the sender's QP under its
 *             thread's feet once it failed.
 *
 * Every check prints "ok NAME" or "FAIL NAME: details"; the last line is
 * "N passed, M failed", and the exit status is nonzero when a check
 * failed. A watchdog ends the program if it blocks for good.
 *
 * Usage: verbs_threads [MESSAGES]   (per pair; default 600)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char *volatile current_section = "start";

static void watchdog(int sig)
{
	char msg[256];
	int n;

	(void)sig;
	n = snprintf(msg, sizeof msg, "\nFAIL watchdog: still in '%s'\n",
		     (const char *)current_section);
	if (n > 0)
		(void)!write(1, msg, (size_t)n);
	_exit(3);
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- devices ---------------------------------------------------------------- */

static struct ibv_context *ctx[2];
static struct ibv_pd *pd[2];
static union ibv_gid gid[2];

static uint32_t psn_of(uint32_t qpn)
{
	return (qpn * 7919u + 0x123u) & 0xffffff;
}

static struct ibv_qp *make_qp(int d, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof ia);
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	return ibv_create_qp(pd[d], &ia);
}

/* RESET -> INIT -> RTR -> RTS, with `timeout` and `retry` for the sender's
 * side; 0 or the first error. */
static int bring_up(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *dgid,
		    int timeout, int retry)
{
	struct ibv_qp_attr a;
	int r;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS);
	if (r)
		return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = psn_of(remote_qpn);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (r)
		return r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = 7;
	a.sq_psn = psn_of(qp->qp_num);
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC);
}

static int to_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* ---- pairs -------------------------------------------------------------------- */

#define DEPTH 16	/* sends in flight per pair */
#define RDEPTH 64	/* receives posted per pair */
#define MAXMSG 4096	/* messages of 1 .. MAXMSG bytes: up to four packets */

/* An RC pair rxe0 -> rxe1 and what its threads count. */
struct pair {
	int id;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *sqp, *rqp;
	char *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
	int messages;		/* to send */
	atomic_int sent;	/* send completions, successful */
	atomic_int send_errors; /* send completions in error */
	atomic_int post_errors;
	atomic_int received;	/* receive completions checked */
	atomic_int bad;		/* data, order or status errors */
	atomic_int stop;	/* the sender stops posting */
	atomic_int error_status; /* the first send completion's error */
	/* Held while a receive buffer is posted again, and while the main
	 * thread destroys the receiving QP (then rqp is NULL). */
	pthread_mutex_t recv_lock;
	char what[96];		/* the first error seen */
};

static size_t msg_len(int pair, int seq)
{
	return 1 + (size_t)((seq * 977u + (unsigned)pair * 131u) % MAXMSG);
}

static unsigned char pattern(int pair, int seq, size_t i)
{
	return (unsigned char)(pair * 131 + seq * 7 + i * 13 + (i >> 8));
}

static void note(struct pair *p, const char *fmt, ...)
{
	va_list ap;

	if (p->bad++ == 0) {
		va_start(ap, fmt);
		vsnprintf(p->what, sizeof p->what, fmt, ap);
		va_end(ap);
	}
}

static int post_recv(struct pair *p, int slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(p->rbuf + (size_t)slot * MAXMSG),
		.length = MAXMSG,
		.lkey = p->rmr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;

	return ibv_post_recv(p->rqp, &wr, &bad);
}

static int pair_new(struct pair *p, int id, struct ibv_comp_channel *ch, int messages,
		    int timeout, int retry)
{
	int i, r;

	memset(p, 0, sizeof *p);
	pthread_mutex_init(&p->recv_lock, NULL);
	p->id = id;
	p->messages = messages;
	p->sbuf = calloc(DEPTH, MAXMSG);
	p->rbuf = calloc(RDEPTH, MAXMSG);
	p->scq = ibv_create_cq(ctx[0], 2 * DEPTH, p, NULL, 0);
	p->rcq = ibv_create_cq(ctx[1], 2 * RDEPTH, p, ch, 0);
	if (!p->sbuf || !p->rbuf || !p->scq || !p->rcq)
		return -1;
	p->smr = ibv_reg_mr(pd[0], p->sbuf, DEPTH * MAXMSG, IBV_ACCESS_LOCAL_WRITE);
	p->rmr = ibv_reg_mr(pd[1], p->rbuf, RDEPTH * MAXMSG, IBV_ACCESS_LOCAL_WRITE);
	p->sqp = make_qp(0, p->scq, p->scq);
	p->rqp = make_qp(1, p->rcq, p->rcq);
	if (!p->smr || !p->rmr || !p->sqp || !p->rqp)
		return -1;
	r = bring_up(p->sqp, p->rqp->qp_num, &gid[1], timeout, retry);
	if (!r)
		r = bring_up(p->rqp, p->sqp->qp_num, &gid[0], timeout, retry);
	for (i = 0; !r && i < RDEPTH; i++)
		r = post_recv(p, i);
	return r ? -1 : 0;
}

static void pair_free(struct pair *p)
{
	if (p->sqp)
		ibv_destroy_qp(p->sqp);
	if (p->rqp)
		ibv_destroy_qp(p->rqp);
	if (p->scq)
		ibv_destroy_cq(p->scq);
	if (p->rcq)
		ibv_destroy_cq(p->rcq);
	if (p->smr)
		ibv_dereg_mr(p->smr);
	if (p->rmr)
		ibv_dereg_mr(p->rmr);
	free(p->sbuf);
	free(p->rbuf);
}

/* Checks a receive completion of pair p, then posts its buffer again. */
static void on_recv(struct pair *p, const struct ibv_wc *wc)
{
	int seq = p->received;
	int slot = (int)wc->wr_id;
	size_t i, n = msg_len(p->id, seq);
	const unsigned char *b = (const unsigned char *)p->rbuf + (size_t)slot * MAXMSG;

	if (wc->status != IBV_WC_SUCCESS) {
		/* Flushed receives of a QP being destroyed are not data errors. */
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			note(p, "receive %d: %s", seq, ibv_wc_status_str(wc->status));
		return;
	}
	if (wc->opcode != IBV_WC_RECV || wc->byte_len != n || slot != seq % RDEPTH) {
		note(p, "receive %d: opcode %d, %u bytes (want %zu), slot %d", seq, wc->opcode,
		     wc->byte_len, n, slot);
	} else {
		for (i = 0; i < n; i++)
			if (b[i] != pattern(p->id, seq, i)) {
				note(p, "receive %d: byte %zu is %#x, want %#x", seq, i, b[i],
				     pattern(p->id, seq, i));
				break;
			}
	}
	p->received++;
	pthread_mutex_lock(&p->recv_lock);
	if (p->rqp && post_recv(p, slot))
		note(p, "ibv_post_recv: %s", strerror(errno));
	pthread_mutex_unlock(&p->recv_lock);
}

/* ---- threads -------------------------------------------------------------------- */

/* Posts p->messages SENDs, at most DEPTH in flight, polling its send CQ. */
static void *sender(void *arg)
{
	struct pair *p = arg;
	struct ibv_wc wc[8];
	int posted = 0, done = 0, n, i;

	while (done < p->messages && !p->stop) {
		while (posted < p->messages && posted - done < DEPTH && !p->stop) {
			int slot = posted % DEPTH;
			size_t len = msg_len(p->id, posted), k;
			char *b = p->sbuf + (size_t)slot * MAXMSG;
			struct ibv_sge sge = {.addr = (uintptr_t)b,
					      .length = (uint32_t)len,
					      .lkey = p->smr->lkey};
			struct ibv_send_wr wr = {.wr_id = (uint64_t)posted,
						 .sg_list = &sge,
						 .num_sge = 1,
						 .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED};
			struct ibv_send_wr *bad;

			for (k = 0; k < len; k++)
				b[k] = (char)pattern(p->id, posted, k);
			if (ibv_post_send(p->sqp, &wr, &bad)) {
				p->post_errors++;
				p->stop = 1;
				break;
			}
			posted++;
		}
		n = ibv_poll_cq(p->scq, 8, wc);
		if (n < 0) {
			note(p, "ibv_poll_cq: %d", n);
			break;
		}
		for (i = 0; i < n; i++) {
			if (wc[i].status == IBV_WC_SUCCESS) {
				if (wc[i].wr_id != (uint64_t)done)
					note(p, "send completion %llu, want %d",
					     (unsigned long long)wc[i].wr_id, done);
				p->sent++;
			} else {
				if (p->send_errors++ == 0)
					p->error_status = wc[i].status;
				p->stop = 1;
			}
			done++;
		}
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

#define NPAIRS 3
static struct pair pairs[NPAIRS];
static struct pair victim;	/* the destroy section's pair */
static struct ibv_comp_channel *chan;
static atomic_int stop_events, stop_async, stop_churn;
static atomic_int events, acks, event_errors, stray_events;

/* Serves the completion channel: the receive CQs of pairs 0 and 1 (and
 * of the destroy section's pair), and the churn thread's CQs. */
static void *event_thread(void *arg)
{
	struct ibv_wc wc[16];
	(void)arg;

	for (;;) {
		struct ibv_cq *cq;
		void *cq_ctx;
		struct pair *p;
		int n, i;

		if (ibv_get_cq_event(chan, &cq, &cq_ctx)) {
			if (errno == EAGAIN && !stop_events) {
				struct pollfd pfd = {.fd = chan->fd, .events = POLLIN};

				poll(&pfd, 1, 20);
				continue;
			}
			if (errno != EAGAIN)
				event_errors++;
			if (stop_events)
				return NULL;
			continue;
		}
		events++;
		p = cq_ctx;
		if (p == &pairs[0] || p == &pairs[1] || p == &victim) {
			if (ibv_req_notify_cq(cq, 0))
				note(p, "ibv_req_notify_cq: %s", strerror(errno));
			while ((n = ibv_poll_cq(cq, 16, wc)) > 0)
				for (i = 0; i < n; i++)
					on_recv(p, &wc[i]);
		} else {
			/* A churn CQ: nothing is ever completed on it. */
			stray_events++;
		}
		/* Last: ibv_destroy_cq waits for it, so the CQ is ours until then. */
		ibv_ack_cq_events(cq, 1);
		acks++;
	}
}

/* Polls pair 2's receive CQ. */
static void *poller(void *arg)
{
	struct pair *p = arg;
	struct ibv_wc wc[16];
	long long end = now_ms() + 30000;

	while (p->received < p->messages && now_ms() < end) {
		int n = ibv_poll_cq(p->rcq, 16, wc), i;

		for (i = 0; i < n; i++)
			on_recv(p, &wc[i]);
		if (n <= 0)
			sched_yield();
	}
	return NULL;
}

static atomic_int async_events;

/* Takes the async events of both contexts, their descriptors non-blocking. */
static void *async_thread(void *arg)
{
	struct pollfd pfd[2];
	int d;
	(void)arg;

	for (d = 0; d < 2; d++) {
		fcntl(ctx[d]->async_fd, F_SETFL, fcntl(ctx[d]->async_fd, F_GETFL) | O_NONBLOCK);
		pfd[d] = (struct pollfd){.fd = ctx[d]->async_fd, .events = POLLIN};
	}
	while (!stop_async) {
		if (poll(pfd, 2, 20) <= 0)
			continue;
		for (d = 0; d < 2; d++) {
			struct ibv_async_event e;

			if (!(pfd[d].revents & POLLIN))
				continue;
			while (ibv_get_async_event(ctx[d], &e) == 0) {
				async_events++;
				ibv_ack_async_event(&e);
			}
		}
	}
	return NULL;
}

static atomic_int churned, churn_errors;

/* CQs on the channel (armed) and QPs made and destroyed while traffic
 * flows; each QP moved to the error state first (async events). */
static void *churn_thread(void *arg)
{
	(void)arg;
	while (!stop_churn) {
		struct ibv_cq *cq = ibv_create_cq(ctx[1], 8, NULL, chan, 0);
		struct ibv_qp *qp = cq ? make_qp(1, cq, cq) : NULL;
		struct ibv_qp_attr a;

		if (!cq || !qp) {
			churn_errors++;
			if (cq)
				ibv_destroy_cq(cq);
			continue;
		}
		if (ibv_req_notify_cq(cq, 0))
			churn_errors++;
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						  IBV_QP_ACCESS_FLAGS) ||
		    to_error(qp))
			churn_errors++;
		if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq))
			churn_errors++;
		churned++;
	}
	return NULL;
}

static atomic_int queries, query_errors;

static void *query_thread(void *arg)
{
	(void)arg;
	while (!stop_churn) {
		struct ibv_port_attr pa;
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		int i;

		if (ibv_query_port(ctx[0], 1, &pa))
			query_errors++;
		for (i = 0; i < NPAIRS; i++)
			if (ibv_query_qp(pairs[i].sqp, &a, IBV_QP_STATE, &ia))
				query_errors++;
		queries++;
		usleep(1000);
	}
	return NULL;
}

/* ---- sections -------------------------------------------------------------------- */

static void report(struct pair *p, const char *name)
{
	check(p->bad == 0 && p->sent == p->messages && p->received == p->messages &&
		      p->send_errors == 0 && p->post_errors == 0,
	      name, "sent %d received %d of %d, send errors %d (first: %s), post errors %d, bad %d (%s)",
	      (int)p->sent, (int)p->received, p->messages, (int)p->send_errors,
	      p->send_errors ? ibv_wc_status_str(p->error_status) : "none",
	      (int)p->post_errors, (int)p->bad, p->what);
}

static void traffic(int messages)
{
	pthread_t snd[NPAIRS], poll_t, churn_t, query_t;
	long long end;
	int i, r = 0;

	current_section = "traffic";
	for (i = 0; i < NPAIRS && !r; i++)
		/* ACK timeout 2^17 * 4.096 us (about 0.5 s), seven retries:
		 * room for a slow machine under ThreadSanitizer. */
		r = pair_new(&pairs[i], i, i < 2 ? chan : NULL, messages, 17, 7);
	if (!check(r == 0, "traffic_setup", "%s", strerror(errno)))
		exit(2);
	for (i = 0; i < 2; i++)
		ibv_req_notify_cq(pairs[i].rcq, 0);
	pthread_create(&poll_t, NULL, poller, &pairs[2]);
	pthread_create(&churn_t, NULL, churn_thread, NULL);
	pthread_create(&query_t, NULL, query_thread, NULL);
	for (i = 0; i < NPAIRS; i++)
		pthread_create(&snd[i], NULL, sender, &pairs[i]);
	for (i = 0; i < NPAIRS; i++)
		pthread_join(snd[i], NULL);
	pthread_join(poll_t, NULL);
	/* The event thread may still be taking the last completions. */
	end = now_ms() + 10000;
	while ((pairs[0].received < messages || pairs[1].received < messages) &&
	       now_ms() < end)
		usleep(1000);
	stop_churn = 1;
	pthread_join(churn_t, NULL);
	pthread_join(query_t, NULL);
	for (i = 0; i < NPAIRS; i++) {
		char name[64];

		snprintf(name, sizeof name, "pair%d_every_byte_in_order", i);
		report(&pairs[i], name);
	}
	check(churned > 0 && churn_errors == 0, "churn_during_traffic",
	      "%d CQ+QP lifetimes, %d errors", (int)churned, (int)churn_errors);
	check(queries > 0 && query_errors == 0, "queries_during_traffic", "%d rounds, %d errors",
	      (int)queries, (int)query_errors);
	printf("# %d channel events, %d on churned CQs, %d CQ+QP lifetimes\n", (int)events,
	       (int)stray_events, (int)churned);
}

static void destroy_during_traffic(void)
{
	pthread_t snd;
	struct ibv_wc wc[16];
	long long end;
	int r, got;

	current_section = "destroy during traffic";
	/* ACK timeout 2^10 * 4.096 us (about 4 ms), one retry: the sender
	 * learns of the gone receiver quickly. */
	r = pair_new(&victim, 7, chan, 1 << 30, 10, 1);
	if (!check(r == 0, "destroy_setup", "%s", strerror(errno)))
		return;
	ibv_req_notify_cq(victim.rcq, 0);
	pthread_create(&snd, NULL, sender, &victim);
	end = now_ms() + 10000;
	while (victim.received < 200 && now_ms() < end)
		usleep(500);
	/* The receiver goes while the sender posts and the event thread
	 * serves its CQ. */
	pthread_mutex_lock(&victim.recv_lock);
	r = to_error(victim.rqp);
	r |= ibv_destroy_qp(victim.rqp);
	victim.rqp = NULL;
	pthread_mutex_unlock(&victim.recv_lock);
	/* Its CQ: armed, on the channel, perhaps with an event queued that
	 * the event thread is taking. The event thread polls it only while
	 * it holds an unacknowledged event, which destroy waits for. */
	r |= ibv_destroy_cq(victim.rcq);
	victim.rcq = NULL;
	check(r == 0, "destroy_receiver_during_traffic", "%s", strerror(errno));
	/* The sender ends with an error (retries exhausted, then flushes). */
	pthread_join(snd, NULL);
	printf("# the sender's first error: %s\n", ibv_wc_status_str(victim.error_status));
	check(victim.send_errors > 0 && victim.bad == 0, "sender_sees_the_receiver_gone",
	      "sent %d received %d, send errors %d, bad %d (%s)", (int)victim.sent,
	      (int)victim.received, (int)victim.send_errors, (int)victim.bad, victim.what);
	/* Its QP raised IBV_EVENT_QP_FATAL on rxe0, for the async thread
	 * (taken before the QP goes: destroying it drops the events about it
	 * not yet taken, as the kernel does). */
	end = now_ms() + 5000;
	while (async_events == 0 && now_ms() < end)
		usleep(1000);
	check(async_events > 0, "async_event_of_the_failed_sender", "none in 5 s");
	/* The rest of its completions, then its QP goes with flushes pending. */
	got = ibv_poll_cq(victim.scq, 16, wc);
	r = ibv_destroy_qp(victim.sqp);
	victim.sqp = NULL;
	check(got >= 0 && r == 0, "destroy_failed_sender", "poll %d destroy %d", got, r);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	pthread_t ev_t, async_t;
	int n = 0, d, i, messages = argc > 1 ? atoi(argv[1]) : 600;
	struct pollfd pfd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, watchdog);
	alarm(120);
	list = ibv_get_device_list(&n);
	if (!check(list && n == 2, "two_devices", "%d devices", n))
		return 2;
	for (d = 0; d < 2; d++) {
		ctx[d] = ibv_open_device(list[d]);
		pd[d] = ctx[d] ? ibv_alloc_pd(ctx[d]) : NULL;
		if (!pd[d] || ibv_query_gid(ctx[d], 1, 0, &gid[d]))
			return check(0, "open", "rxe%d: %s", d, strerror(errno)), 2;
	}
	chan = ibv_create_comp_channel(ctx[1]);
	if (!check(chan != NULL, "ibv_create_comp_channel", "%s", strerror(errno)))
		return 2;
	/* Non-blocking, so that the event thread can be stopped. */
	fcntl(chan->fd, F_SETFL, fcntl(chan->fd, F_GETFL) | O_NONBLOCK);
	pthread_create(&ev_t, NULL, event_thread, NULL);
	pthread_create(&async_t, NULL, async_thread, NULL);

	traffic(messages);
	destroy_during_traffic();

	current_section = "teardown";
	stop_events = 1;
	pthread_join(ev_t, NULL);
	stop_async = 1;
	pthread_join(async_t, NULL);
	check(event_errors == 0 && events == acks, "channel_events",
	      "%d events, %d acked, %d errors", (int)events, (int)acks, (int)event_errors);
	/* Everything taken: the channel's descriptor shows nothing. */
	pfd = (struct pollfd){.fd = chan->fd, .events = POLLIN};
	check(poll(&pfd, 1, 0) == 0, "channel_fd_empty_at_the_end",
	      "poll says readable with every event taken");
	for (i = 0; i < NPAIRS; i++)
		pair_free(&pairs[i]);
	pair_free(&victim);
	check(ibv_destroy_comp_channel(chan) == 0, "ibv_destroy_comp_channel", "%s",
	      strerror(errno));
	for (d = 0; d < 2; d++) {
		ibv_dealloc_pd(pd[d]);
		ibv_close_device(ctx[d]);
	}
	ibv_free_device_list(list);
	printf("%d passed, %d failed\n", (int)passed, (int)failed);
	return failed ? 1 : 0;
}
