/*
 * rdmacm_threads: rdma_cm listeners created and destroyed while connection
 * requests for them arrive, on the drop-in librdmacm.so.1 of rxe-rs, for
 * ThreadSanitizer (tests/tsan.sh builds the library instrumented and this
 * program with -fsanitize=thread, and fails on any report).
 *
 * One process, two soft devices (RXE_DEVICES=rxe0=SERVER,rxe1=CLIENT).
 * The main thread, round after round, creates a listener on the server's
 * address (a new port each round), lets it live a few milliseconds and
 * destroys it. A server thread takes the events of the listeners' channel
 * (non-blocking, polled): each CONNECT_REQUEST is acknowledged and its
 * new id rejected and destroyed. Six client threads connect to the
 * current port again and again (without a QP, giving qp_num) and wait for
 * the answer. The library's bridge thread turns each request into the
 * listener's CONNECT_REQUEST while the listener may be being destroyed:
 * it once used a listener freed under it, and could hand out a request
 * naming a freed listener or leave one queued whose new id was never
 * answered (see "Concurrency" in docs/reliability.md).
 *
 * Checks: no CONNECT_REQUEST is taken after its listener's destroy
 * returned; every connection attempt gets an answer (rejected, or
 * unreachable) within 10 s; the channel's descriptor is empty at the end.
 * Every check prints "ok NAME" or "FAIL NAME: details"; the last line is
 * "N passed, M failed"; a watchdog ends the program if it blocks for good.
 *
 * Usage: rdmacm_threads SERVER CLIENT PORT [ROUNDS]
 *   (addresses of rxe0 and rxe1; ports PORT .. PORT+ROUNDS-1; ROUNDS 40,
 *   at most 64)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define SA(x) ((struct sockaddr *)&(x))

static const char *server_ip, *client_ip;
static int base_port, rounds = 40;

static void watchdog(int sig)
{
	static const char msg[] = "\nFAIL watchdog: still running after 150 s\n";

	(void)sig;
	(void)!write(1, msg, sizeof msg - 1);
	_exit(3);
}

static struct sockaddr_in sin4(const char *ip, int port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof s);
	s.sin_family = AF_INET;
	s.sin_port = htons((unsigned short)port);
	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1;
}

/* ---- listeners, and the ones destroyed ------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define MAXROUNDS 64
static void *destroyed[MAXROUNDS];	/* listeners whose destroy returned */
static int ndestroyed;
static atomic_int current_port;	/* where the clients connect; 0: stop */
static atomic_int stop_server;
static atomic_int requests, late_requests, server_errors;

/* Whether `id` is a listener whose destroy returned (and whose address
 * no listener since has). */
static int was_destroyed(void *id)
{
	int i, r = 0;

	pthread_mutex_lock(&lock);
	for (i = 0; i < ndestroyed; i++)
		if (destroyed[i] == id)
			r = 1;
	pthread_mutex_unlock(&lock);
	return r;
}

static void forget_destroyed(void *id)
{
	int i;

	pthread_mutex_lock(&lock);
	for (i = 0; i < ndestroyed; i++)
		if (destroyed[i] == id)
			destroyed[i] = NULL;
	pthread_mutex_unlock(&lock);
}

/* Takes the listeners' events: each request rejected and its id destroyed. */
static void *server_thread(void *arg)
{
	struct rdma_event_channel *ch = arg;

	while (!stop_server) {
		struct rdma_cm_event *e;

		if (!readable(ch->fd, 20))
			continue;
		while (rdma_get_cm_event(ch, &e) == 0) {
			struct rdma_cm_id *id = e->id;

			if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
				rdma_ack_cm_event(e);
				continue;
			}
			requests++;
			/* Its destroy has not returned: it waits for this ack. */
			if (was_destroyed(e->listen_id))
				late_requests++;
			rdma_ack_cm_event(e);
			if (rdma_reject(id, NULL, 0) || rdma_destroy_id(id))
				server_errors++;
		}
		if (errno != EAGAIN)
			server_errors++;
	}
	return NULL;
}

#define NCLIENTS 6
static atomic_int attempts, answered, unanswered, client_errors;

/* Connects to the current port until told to stop; counts the answers. */
static void *client_thread(void *arg)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in src = sin4(client_ip, 0);

	(void)arg;
	if (!ch) {
		client_errors++;
		return NULL;
	}
	for (;;) {
		int port = current_port;
		struct sockaddr_in dst = sin4(server_ip, port);
		struct rdma_cm_id *id = NULL;
		struct rdma_cm_event *e;
		struct rdma_conn_param cp;
		int step, ok = 1;

		if (!port)
			break;
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
			client_errors++;
			break;
		}
		/* Address, route, then the connection's answer. */
		for (step = 0; step < 3 && ok; step++) {
			if (step == 0)
				ok = rdma_resolve_addr(id, SA(src), SA(dst), 2000) == 0;
			else if (step == 1)
				ok = rdma_resolve_route(id, 2000) == 0;
			else {
				memset(&cp, 0, sizeof cp);
				cp.qp_num = 0x1234;
				cp.retry_count = 7;
				ok = rdma_connect(id, &cp) == 0;
				attempts++;
			}
			if (!ok) {
				client_errors++;
				break;
			}
			if (!readable(ch->fd, 10000) || rdma_get_cm_event(ch, &e)) {
				if (step == 2)
					unanswered++;
				else
					client_errors++;
				ok = 0;
				break;
			}
			if (step == 2)
				answered++;
			else if (e->event != (step ? RDMA_CM_EVENT_ROUTE_RESOLVED
						   : RDMA_CM_EVENT_ADDR_RESOLVED)) {
				client_errors++;
				ok = 0;
			}
			rdma_ack_cm_event(e);
		}
		rdma_destroy_id(id);
	}
	rdma_destroy_event_channel(ch);
	return NULL;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *sch;
	pthread_t srv, cli[NCLIENTS];
	struct timespec t;
	int r, i, made = 0, errs = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4) {
		fprintf(stderr, "usage: rdmacm_threads SERVER CLIENT PORT [ROUNDS]\n");
		return 2;
	}
	server_ip = argv[1];
	client_ip = argv[2];
	base_port = atoi(argv[3]);
	if (argc > 4)
		rounds = atoi(argv[4]);
	if (rounds > MAXROUNDS)
		rounds = MAXROUNDS;
	signal(SIGALRM, watchdog);
	alarm(150);
	srand(1);
	sch = rdma_create_event_channel();
	if (!check(sch != NULL, "rdma_create_event_channel", "errno %d", errno))
		return 2;
	fcntl(sch->fd, F_SETFL, fcntl(sch->fd, F_GETFL) | O_NONBLOCK);
	pthread_create(&srv, NULL, server_thread, sch);
	current_port = base_port;
	for (i = 0; i < NCLIENTS; i++)
		pthread_create(&cli[i], NULL, client_thread, NULL);
	for (i = 0; i < rounds; i++) {
		struct rdma_cm_id *lid = NULL;
		struct sockaddr_in la = sin4(server_ip, base_port + i);

		if (rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP)) {
			errs++;
			continue;
		}
		forget_destroyed(lid);
		if (rdma_bind_addr(lid, SA(la)) || rdma_listen(lid, 8)) {
			errs++;
			rdma_destroy_id(lid);
			continue;
		}
		made++;
		current_port = base_port + i;
		/* 1 to 20 ms of requests (100 ms in the first rounds, so
		 * that some surely come), then the listener goes. */
		t.tv_sec = 0;
		t.tv_nsec = (i < 4 ? 100 : 1 + rand() % 20) * 1000000L;
		nanosleep(&t, NULL);
		r = rdma_destroy_id(lid);
		if (r)
			errs++;
		pthread_mutex_lock(&lock);
		destroyed[ndestroyed++] = lid;
		pthread_mutex_unlock(&lock);
	}
	current_port = 0;
	for (i = 0; i < NCLIENTS; i++)
		pthread_join(cli[i], NULL);
	stop_server = 1;
	pthread_join(srv, NULL);
	check(made == rounds && errs == 0, "listeners_made_and_destroyed", "%d of %d, %d errors",
	      made, rounds, errs);
	printf("# %d connection requests taken, %d attempts, %d answered\n", (int)requests,
	       (int)attempts, (int)answered);
	check(requests > 0, "requests_reached_the_listeners", "none");
	check(late_requests == 0, "no_request_after_its_listener_is_destroyed",
	      "%d taken after rdma_destroy_id of their listener returned", (int)late_requests);
	check(attempts > 0 && unanswered == 0 && client_errors == 0,
	      "every_connection_attempt_answered",
	      "%d attempts, %d answered, %d with no answer in 10 s, %d client errors",
	      (int)attempts, (int)answered, (int)unanswered, (int)client_errors);
	check(server_errors == 0, "server_thread_calls", "%d failed", (int)server_errors);
	check(!readable(sch->fd, 0), "channel_fd_empty_at_the_end",
	      "poll says readable with every event taken");
	rdma_destroy_event_channel(sch);
	printf("%d passed, %d failed\n", (int)passed, (int)failed);
	return failed ? 1 : 0;
}
