/*
 * numa.c - NUMA nodes of NICs and disks from sysfs, their CPUs, and pinning (see numa.h).
 *
 * A file's disk is found from its st_dev: dev/block/MAJ:MIN links to the block device's
 * directory (a partition's lies inside its disk's, and holds a "partition" file); the disk's
 * "device" link names the hardware, whose numa_node is read, or, where it has none (a virtio
 * disk's virtioN), that of the device above it (the PCI function), a few levels at most and
 * never outside the root's devices/ tree.
 */
#include "net/numa.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DEV_WALK_UP 4 /* levels above a disk's device searched for a numa_node */

const char *numa_sysfs_root(void)
{
	/* (not honoured where the process gained privileges: set-user-ID, capabilities) */
	const char *root = secure_getenv("ACCELNET_SYSFS_ROOT");
	return root && root[0] ? root : "/sys";
}

/* Read <path> into <buf>, terminated: its length, or -errno (-EFBIG when it holds <len> - 1
 * bytes or more; -EINVAL when it is not a regular file, as every sysfs attribute is: a FIFO or
 * a terminal put where one was expected must not block the reader, so it is opened without
 * waiting and looked at before any read). */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -errno;
	int bad = fstat(fd, &st) < 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
	if (bad) {
		close(fd);
		return -bad;
	}
	size_t n = 0;
	ssize_t r = 0;
	while (n < len - 1 && (r = read(fd, buf + n, len - 1 - n)) > 0)
		n += (size_t)r;
	int err = r < 0 ? errno : 0;
	close(fd);
	if (err)
		return -err;
	if (n == len - 1)
		return -EFBIG;
	buf[n] = 0;
	return (ssize_t)n;
}

/* A numa_node file: "-1" or a node below NUMA_NODES_MAX, one trailing newline at most.
 * The node, -1 (none shown), or -ENOENT when there is no such file. */
static int read_node_file(const char *path)
{
	char text[32];
	ssize_t n = read_small(path, text, sizeof(text));
	if (n == -ENOENT)
		return -ENOENT;
	if (n <= 0)
		return -1;
	if (text[n - 1] == '\n')
		text[--n] = 0;
	if (n == 0 || n > 4)
		return -1;
	const char *p = text;
	if (!strcmp(p, "-1"))
		return -1;
	int v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9' || (p != text && text[0] == '0'))
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v < NUMA_NODES_MAX ? v : -1;
}

/* Read one decimal CPU number at *p (no sign, no leading zero): 0, -EINVAL or -ERANGE. */
static int parse_cpu(const char **p, const char *end, unsigned *out)
{
	const char *s = *p;
	unsigned v = 0;
	if (s == end || *s < '0' || *s > '9')
		return -EINVAL;
	if (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9')
		return -EINVAL;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (unsigned)(*s - '0');
		if (v >= NUMA_CPUS_MAX)
			return -ERANGE;
	}
	*p = s;
	*out = v;
	return 0;
}

int numa_parse_cpulist(const char *text, size_t len, cpu_set_t *out)
{
	const char *p = text, *end = text + len;
	CPU_ZERO(out);
	if (len && end[-1] == '\n')
		end--;
	int first = 1;
	unsigned next = 0; /* the lowest CPU the next range may start at */
	while (p < end) {
		unsigned lo, hi;
		int rc;
		if (!first && *p++ != ',')
			return -EINVAL;
		if ((rc = parse_cpu(&p, end, &lo)))
			return rc;
		hi = lo;
		if (p < end && *p == '-') {
			p++;
			if ((rc = parse_cpu(&p, end, &hi)))
				return rc;
			if (hi < lo)
				return -EINVAL;
		}
		if (!first && lo < next)
			return -EINVAL; /* out of order, or overlapping the range before */
		for (unsigned c = lo; c <= hi; c++)
			CPU_SET(c, out);
		next = hi + 1;
		first = 0;
	}
	return 0;
}

int numa_format_cpulist(const cpu_set_t *set, char *out, size_t len)
{
	size_t n = 0;
	if (!len)
		return -ENOSPC;
	out[0] = 0;
	for (int c = 0; c < NUMA_CPUS_MAX; c++) {
		if (!CPU_ISSET(c, set))
			continue;
		int hi = c;
		while (hi + 1 < NUMA_CPUS_MAX && CPU_ISSET(hi + 1, set))
			hi++;
		int w = hi == c ? snprintf(out + n, len - n, "%s%d", n ? "," : "", c)
				: snprintf(out + n, len - n, "%s%d-%d", n ? "," : "", c, hi);
		if (w < 0 || (size_t)w >= len - n) {
			out[0] = 0;
			return -ENOSPC;
		}
		n += (size_t)w;
		c = hi;
	}
	return (int)n;
}

int numa_read_nic_node(const char *ifname)
{
	char path[PATH_MAX];
	if (!ifname[0] || strchr(ifname, '/') || !strcmp(ifname, ".") || !strcmp(ifname, "..") ||
	    snprintf(path, sizeof(path), "%s/class/net/%s/device/numa_node", numa_sysfs_root(),
		     ifname) >= (int)sizeof(path))
		return -1;
	int node = read_node_file(path);
	return node >= 0 ? node : -1;
}

/* Cut the last component of <path> (a resolved one): 0, or -ENOENT at the top. */
static int path_up(char *path)
{
	char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return -ENOENT;
	*slash = 0;
	return 0;
}

int numa_read_dev_node(dev_t dev)
{
	char path[PATH_MAX], top[PATH_MAX], disk[PATH_MAX], hw[PATH_MAX];
	struct stat st;
	if (snprintf(path, sizeof(path), "%s/devices", numa_sysfs_root()) >= (int)sizeof(path) ||
	    !realpath(path, top))
		return -1;
	if (snprintf(path, sizeof(path), "%s/dev/block/%u:%u", numa_sysfs_root(), major(dev),
		     minor(dev)) >= (int)sizeof(path) ||
	    !realpath(path, disk))
		return -1;
	/* a partition's directory lies inside its disk's */
	if (snprintf(path, sizeof(path), "%s/partition", disk) < (int)sizeof(path) &&
	    stat(path, &st) == 0 && path_up(disk))
		return -1;
	if (snprintf(path, sizeof(path), "%s/device", disk) >= (int)sizeof(path) ||
	    !realpath(path, hw))
		return -1;
	size_t toplen = strlen(top);
	for (int i = 0; i < DEV_WALK_UP; i++) {
		/* only beneath <root>/devices/: a link that leads elsewhere is not followed */
		if (strncmp(hw, top, toplen) || hw[toplen] != '/')
			return -1;
		if (snprintf(path, sizeof(path), "%s/numa_node", hw) >= (int)sizeof(path))
			return -1;
		int node = read_node_file(path);
		if (node != -ENOENT)
			return node;
		if (path_up(hw))
			return -1;
	}
	return -1;
}

int numa_read_node_cpus(int node, cpu_set_t *out)
{
	char path[PATH_MAX], text[8192];
	if (node < 0 || node >= NUMA_NODES_MAX)
		return -ENOENT;
	if (snprintf(path, sizeof(path), "%s/devices/system/node/node%d/cpulist", numa_sysfs_root(),
		     node) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	ssize_t n = read_small(path, text, sizeof(text));
	if (n < 0)
		return (int)n;
	return numa_parse_cpulist(text, (size_t)n, out);
}

int numa_count_nodes(void)
{
	char path[PATH_MAX], text[8192];
	cpu_set_t nodes; /* node numbers, in the same list format as CPUs */
	if (snprintf(path, sizeof(path), "%s/devices/system/node/online", numa_sysfs_root()) >=
	    (int)sizeof(path))
		return 1;
	ssize_t n = read_small(path, text, sizeof(text));
	if (n < 0 || numa_parse_cpulist(text, (size_t)n, &nodes))
		return 1;
	int count = CPU_COUNT(&nodes);
	return count ? count : 1;
}

int numa_choose_cpus(int node, int nodes, const cpu_set_t *node_cpus, const cpu_set_t *allowed,
		     cpu_set_t *out)
{
	if (node < 0 || nodes <= 1)
		return -ENOENT;
	CPU_AND(out, node_cpus, allowed);
	return CPU_COUNT(out) ? 0 : -ENOENT;
}

int numa_pick_cpus(int node, cpu_set_t *out)
{
	cpu_set_t node_cpus, allowed;
	if (node < 0)
		return -ENOENT;
	int nodes = numa_count_nodes();
	if (nodes <= 1)
		return -ENOENT;
	int rc = numa_read_node_cpus(node, &node_cpus);
	if (rc)
		return rc;
	/* the main thread's: taskset and cpusets set every thread's, and ours may be pinned */
	if (sched_getaffinity(getpid(), sizeof(allowed), &allowed) < 0)
		return -errno;
	return numa_choose_cpus(node, nodes, &node_cpus, &allowed, out);
}

int numa_pin_thread(const cpu_set_t *set, cpu_set_t *seen)
{
	int rc = pthread_setaffinity_np(pthread_self(), sizeof(*set), set);
	if (rc)
		return -rc;
	if (seen && (rc = pthread_getaffinity_np(pthread_self(), sizeof(*seen), seen)))
		return -rc;
	return 0;
}
