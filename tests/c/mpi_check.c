/*
 * mpi_check: a small MPI program for rxe-rs's middleware tests (issue 32),
 * compiled with Open MPI's and MPICH's mpicc. Every rank takes part:
 *   * ping-pong between rank 0 and every other rank at 8 B, 4 KiB and
 *     1 MiB, each message's bytes checked on arrival;
 *   * an allreduce (sum) of a vector whose result is checked on every rank;
 *   * a bandwidth loop (rank 0 to rank 1, 1 MiB x 20).
 * It prints "mpi_check: rank R of N ok" per rank, rank 0 also the half
 * round trip of the 8-byte ping-pong ("pingpong 8 B: X us") and the
 * bandwidth, and exits nonzero (MPI_Abort) on any wrong byte.
 *
 * The 8-byte ping-pong is timed after 20 untimed exchanges (UCP wires its
 * RC lanes up on the first messages); "--iters N" times N exchanges
 * instead of 200 (tests/perf/measure.sh's middleware group).
 *
 * With "--loop", ranks 0 and 1 only ping-pong 4 KiB for up to 120 s, and
 * rank 1 first prints "mpi_check: rank 1 pid P": the test that kills a
 * rank mid-run kills that one.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static void fail(const char *what, long at)
{
	fprintf(stderr, "mpi_check: rank %d: %s wrong at %ld\n", rank, what, at);
	MPI_Abort(MPI_COMM_WORLD, 2);
}

static void fill(unsigned char *b, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 31 + seed);
}

static void check(const unsigned char *b, size_t n, int seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)(i * 31 + seed))
			fail(what, (long)i);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const size_t sizes[] = { 8, 4096, 1 << 20 };
	unsigned char *buf = malloc(1 << 20);
	int iters = 200;
	if (argc > 2 && !strcmp(argv[1], "--iters"))
		iters = atoi(argv[2]) > 0 ? atoi(argv[2]) : iters;

	if (argc > 1 && !strcmp(argv[1], "--loop")) {
		if (rank == 1)
			printf("mpi_check: rank 1 pid %ld\n", (long)getpid());
		fflush(stdout);
		double t0 = MPI_Wtime();
		while (MPI_Wtime() - t0 < 120 && rank < 2 && size > 1) {
			if (rank == 0) {
				MPI_Send(buf, 4096, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(buf, 4096, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, 4096, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, 4096, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
			}
		}
		printf("mpi_check: rank %d looped to its end\n", rank);
		MPI_Finalize();
		return 0;
	}

	for (int peer = 1; peer < size; peer++) {
		for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
			size_t n = sizes[s];
			int reps = n > 65536 ? 5 : iters;
			int warm = n == 8 ? 20 : 0;
			double t0 = MPI_Wtime();
			for (int k = 0; k < warm + reps; k++) {
				if (k == warm)
					t0 = MPI_Wtime();
				int seed = k + peer + (int)s;
				if (rank == 0) {
					fill(buf, n, seed);
					MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
					MPI_Recv(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
					check(buf, n, seed + 1, "pong");
				} else if (rank == peer) {
					MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
					check(buf, n, seed, "ping");
					fill(buf, n, seed + 1);
					MPI_Send(buf, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
				}
			}
			double t = MPI_Wtime() - t0;
			if (rank == 0 && n == 8)
				printf("mpi_check: pingpong 8 B with rank %d: %.2f us half round trip\n", peer,
				       t / reps / 2 * 1e6);
		}
	}

	/* allreduce: rank r contributes r + i at index i */
	enum { V = 1000 };
	long in[V], out[V];
	for (int i = 0; i < V; i++)
		in[i] = rank + i;
	MPI_Allreduce(in, out, V, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < V; i++)
		if (out[i] != (long)size * (size - 1) / 2 + (long)size * i)
			fail("allreduce", i);

	if (size > 1) {
		const int n = 1 << 20, reps = 20;
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int k = 0; k < reps; k++) {
			if (rank == 0) {
				fill(buf, n, k);
				MPI_Send(buf, n, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
			} else if (rank == 1) {
				MPI_Recv(buf, n, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check(buf, n, k, "bandwidth");
			}
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0)
			printf("mpi_check: bandwidth 1 MiB x %d: %.1f MB/s\n", reps,
			       (double)n * reps / (MPI_Wtime() - t0) / 1e6);
	}
	printf("mpi_check: rank %d of %d ok\n", rank, size);
	free(buf);
	MPI_Finalize();
	return 0;
}
