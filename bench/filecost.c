/*
 * filecost.c - what a receiver pays, in CPU, for each file it writes: the calls `accelnet xfer
 * serve` makes per file today (a part and a state file created, locked, written, synced, the
 * part given its mode and time, renamed into place, the state removed), each timed on its own
 * with the thread's CPU clock, and the least any receiver that writes files one by one pays
 * (create, write, time, mode, close: what `tar -x` does). Files of 4 KiB in <dir> (a tmpfs,
 * as the xfer bench receives into), <n> of them.
 *
 * It answers issue 32's arithmetic for small files: N files a second on one core leave
 * 1e6 / N microseconds a file for everything, the network included.
 *
 * usage: filecost [DIR (/dev/shm/filecost)] [N (10000)]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum call {
	C_FSTATAT,
	C_OPEN_PART,
	C_OPEN_STATE,
	C_FLOCK,
	C_FTRUNCATE,
	C_PREAD_STATE,
	C_PWRITE_DATA,
	C_PWRITE_STATE,
	C_FSYNC,
	C_FCHMOD,
	C_FUTIMENS,
	C_RENAME,
	C_UNLINK_STATE,
	C_CLOSE,
	C_COUNT
};

static const char *const call_name[C_COUNT] = {"fstatat (final path)",
					       "openat part (create)",
					       "openat state (create)",
					       "flock",
					       "ftruncate",
					       "pread state",
					       "pwrite 4 KiB",
					       "pwrite state",
					       "fsync",
					       "fchmod",
					       "futimens",
					       "renameat",
					       "unlinkat state",
					       "close"};

static double cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double spent[C_COUNT];
static long calls[C_COUNT];

#define TIMED(k, expr)                                                                             \
	do {                                                                                       \
		double t0_ = cpu_ns();                                                             \
		expr;                                                                              \
		spent[k] += cpu_ns() - t0_;                                                        \
		calls[k]++;                                                                        \
	} while (0)

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/dev/shm/filecost";
	long n = argc > 2 ? atol(argv[2]) : 10000;
	char sub[4096];
	snprintf(sub, sizeof(sub), "%s/.state", dir);
	if ((mkdir(dir, 0755) && access(dir, W_OK)) || (mkdir(sub, 0755) && access(sub, W_OK))) {
		perror(dir);
		return 1;
	}
	int dfd = open(dir, O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || n <= 0) {
		fprintf(stderr, "usage: filecost [DIR] [N]\n");
		return 2;
	}
	char data[4096], state[64] = {0};
	memset(data, 7, sizeof(data));
	struct timespec times[2] = {{1, 0}, {1, 0}};
	struct stat sb;
	int bad = 0;
	for (long i = 0; i < n; i++) {
		char part[64], st[64], fin[64];
		snprintf(part, sizeof(part), ".state/%ld.part", i);
		snprintf(st, sizeof(st), ".state/%ld.state", i);
		snprintf(fin, sizeof(fin), "f%ld", i);
		int pf, sf;
		TIMED(C_FSTATAT, (void)fstatat(dfd, fin, &sb, 0));
		TIMED(C_OPEN_PART, pf = openat(dfd, part, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
		TIMED(C_OPEN_STATE, sf = openat(dfd, st, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
		if (pf < 0 || sf < 0) {
			perror("openat");
			return 1;
		}
		TIMED(C_FLOCK, bad |= flock(sf, LOCK_EX));
		TIMED(C_FTRUNCATE, bad |= ftruncate(pf, sizeof(data)));
		TIMED(C_PREAD_STATE, bad |= pread(sf, state, sizeof(state), 0) < 0);
		TIMED(C_PWRITE_DATA, bad |= pwrite(pf, data, sizeof(data), 0) != sizeof(data));
		TIMED(C_PWRITE_STATE, bad |= pwrite(sf, state, sizeof(state), 0) != sizeof(state));
		TIMED(C_FSYNC, bad |= fsync(sf));
		TIMED(C_FSYNC, bad |= fsync(pf));
		TIMED(C_FCHMOD, bad |= fchmod(pf, 0644));
		TIMED(C_FUTIMENS, bad |= futimens(pf, times));
		TIMED(C_RENAME, bad |= renameat(dfd, part, dfd, fin));
		TIMED(C_UNLINK_STATE, bad |= unlinkat(dfd, st, 0));
		TIMED(C_FLOCK, bad |= flock(sf, LOCK_UN));
		TIMED(C_CLOSE, bad |= close(sf));
		TIMED(C_CLOSE, bad |= close(pf));
	}
	double clock_cost = cpu_ns(), per_file = 0;
	for (long i = 0; i < n; i++)
		(void)cpu_ns();
	clock_cost = (cpu_ns() - clock_cost) / (double)n; /* one reading of the clock */
	printf("%-24s %10s %9s %12s\n", "call (xfer receiver)", "us a call", "a file", "us a file");
	for (int k = 0; k < C_COUNT; k++) {
		double each = spent[k] / (double)calls[k] - clock_cost;
		double per = each * (double)calls[k] / (double)n;
		per_file += per;
		printf("%-24s %10.2f %9.1f %12.2f\n", call_name[k], each / 1e3,
		       (double)calls[k] / (double)n, per / 1e3);
	}
	printf("xfer receiver's file calls: %.1f us CPU a file\n", per_file / 1e3);
	double t0 = cpu_ns();
	for (long i = 0; i < n; i++) {
		char fin[64];
		snprintf(fin, sizeof(fin), "g%ld", i);
		int fd = openat(dfd, fin, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0) {
			perror("openat");
			return 1;
		}
		bad |= write(fd, data, sizeof(data)) != sizeof(data);
		bad |= futimens(fd, times);
		bad |= fchmod(fd, 0644);
		bad |= close(fd);
	}
	printf("least a file costs (openat O_CREAT, write, futimens, fchmod, close): %.1f us CPU\n",
	       (cpu_ns() - t0) / (double)n / 1e3);
	if (bad)
		fprintf(stderr, "some calls failed: the figures are not to be trusted\n");
	return bad ? 1 : 0;
}
