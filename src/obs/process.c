/*
 * process.c - the process figures of a Prometheus client (see process.h), from getrusage(),
 * getrlimit() and /proc/self. Each call reads the kernel afresh; nothing is cached, so two
 * scrapes never disagree about when a figure was taken. Unreadable figures read 0 (a
 * sandbox without /proc): the scrape goes on.
 */
#include "obs/process.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

double process_cpu_seconds(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Field <k> (0: size, 1: resident) of /proc/self/statm, in bytes. */
static double statm_bytes(int k)
{
	unsigned long v[2] = {0, 0};
	FILE *f = fopen("/proc/self/statm", "re");
	if (!f)
		return 0;
	int n = fscanf(f, "%lu %lu", &v[0], &v[1]);
	fclose(f);
	long page = sysconf(_SC_PAGESIZE);
	return n == 2 && page > 0 ? (double)v[k] * (double)page : 0;
}

double process_resident_bytes(void)
{
	return statm_bytes(1);
}

double process_virtual_bytes(void)
{
	return statm_bytes(0);
}

double process_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 0;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n ? (double)(n - 1) : 0; /* not the descriptor of d itself */
}

double process_max_fds(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	return (double)rl.rlim_cur;
}
