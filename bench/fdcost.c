/*
 * fdcost.c - what a socket call pays for its descriptor table being shared by threads.
 *
 * Every socket call starts by looking its descriptor up (the kernel's fdget). When the
 * calling task is the only user of its descriptor table the lookup borrows the file; when
 * threads share the table (the proxy's main thread and workers do) it takes a reference on
 * the file and drops it when the call ends: two atomic operations a call. A worker could
 * have a table of its own (unshare(CLONE_FILES) at its start) and skip them; this measures
 * what that would save, on the cheapest socket call there is: recv() on an empty
 * non-blocking socket, which finds nothing and returns EAGAIN (entry, lookup, exit).
 *
 * Three ways, each in a child process of its own, interleaved over <rounds>: "alone" (one
 * thread), "shared" (a second thread, asleep, shares the table), "private" (the same, the
 * measuring thread having unshared its table). Each round takes the fastest of 20 batches
 * of <calls> calls; it prints, in ns a call, the median over rounds and the fastest round
 * (on a busy machine the floor is the figure: other work only adds), and the two threaded
 * ways over "alone" (the median of the same rounds' ratios). Pin it to one CPU (taskset).
 *
 * usage: fdcost [CALLS (20000)] [ROUNDS (9)]
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum way { ALONE, SHARED, PRIVATE, NWAYS };
static const char *const way_name[NWAYS] = {"alone", "shared", "private"};

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *sleeper(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

/* In a child: set the way up, time the calls, the fastest batch's ns a call. */
static double way_measure(enum way way, long calls)
{
	int sv[2];
	pthread_t th;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0)
		return -1;
	if (way != ALONE && pthread_create(&th, NULL, sleeper, NULL))
		return -1;
	if (way == PRIVATE && unshare(CLONE_FILES) < 0)
		return -1;
	double best = 1e18;
	char c;
	for (int batch = 0; batch < 20; batch++) {
		double t0 = now_ns();
		for (long i = 0; i < calls; i++)
			if (recv(sv[0], &c, 1, 0) >= 0)
				return -1;
		double per = (now_ns() - t0) / (double)calls;
		if (per < best)
			best = per;
	}
	return best;
}

static double way_run(enum way way, long calls)
{
	int p[2];
	double ns = -1;
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		ns = way_measure(way, calls);
		ssize_t n = write(p[1], &ns, sizeof(ns));
		_exit(n == (ssize_t)sizeof(ns) ? 0 : 1);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], &ns, sizeof(ns)) != (ssize_t)sizeof(ns))
		ns = -1;
	close(p[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return ns;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 20000;
	int rounds = argc > 2 ? atoi(argv[2]) : 9;
	if (calls < 1 || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "usage: fdcost [CALLS (20000)] [ROUNDS (9)]\n");
		return 2;
	}
	double *ns[NWAYS], *ratio[NWAYS];
	for (int w = 0; w < NWAYS; w++) {
		ns[w] = calloc((size_t)rounds, sizeof(double));
		ratio[w] = calloc((size_t)rounds, sizeof(double));
		if (!ns[w] || !ratio[w])
			return 1;
	}
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < NWAYS; k++) {
			int w = r % 2 ? NWAYS - 1 - k : k; /* the order flips each round */
			if ((ns[w][r] = way_run((enum way)w, calls)) < 0) {
				fprintf(stderr, "fdcost: the %s way failed to run\n", way_name[w]);
				return 1;
			}
		}
		for (int w = 0; w < NWAYS; w++)
			ratio[w][r] = ns[w][r] / ns[ALONE][r];
	}
	for (int w = 0; w < NWAYS; w++) {
		double med = median(ns[w], rounds); /* sorts: ns[w][0] is the fastest after */
		printf("%-8s %7.1f ns a call (fastest round %7.1f)   %.3f x alone\n", way_name[w],
		       med, ns[w][0], median(ratio[w], rounds));
	}
	return 0;
}
