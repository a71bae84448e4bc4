/*
 * numa.h - which NUMA node a NIC or a file's disk hangs off, that node's CPUs, and a thread
 * pinned to them.
 *
 * On a machine of several nodes a NIC (or an NVMe disk) sits on one node's PCIe root: its DMA
 * lands in that node's memory and its interrupts are best taken by that node's CPUs. A thread
 * that moves its bytes is cheapest on those CPUs too. sysfs says where each device sits (its
 * numa_node file: -1, or no file, where it shows none: virtual devices, machines of one node)
 * and which CPUs each node has (devices/system/node/nodeN/cpulist, a list of ranges such as
 * "0-3,8-11"). Everything is read under a sysfs root, "/sys", that the environment variable
 * ACCELNET_SYSFS_ROOT replaces: for tests only, which build a fake tree of two nodes on a
 * machine of one (a process that gained privileges, set-user-ID or file capabilities, ignores
 * it). What is read there is read as a peer's: regular files only (a FIFO or a device is
 * refused before any read, never waited on), a few KiB at most, links that loop or lead out of
 * the devices tree not followed, and the device's node taken as unknown on anything odd.
 *
 * The choice never leaves what the process may use: a node's CPUs are intersected with the
 * CPUs its main thread may run on (taskset and a cgroup's cpuset set those for every thread),
 * and nothing is chosen when the node is not known, when the machine shows one node, or when
 * the intersection is empty. The cpulist parser is strict (it reads what a peer's sysfs, or a
 * fuzzer, may hand it): digits, '-' and ',' only, ranges ascending and apart, every CPU below
 * NUMA_CPUS_MAX, one trailing newline at most.
 */
#ifndef ACCELNET_NET_NUMA_H
#define ACCELNET_NET_NUMA_H

#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

#define NUMA_CPUS_MAX CPU_SETSIZE /* CPUs a list may name: 0 .. NUMA_CPUS_MAX - 1 */
#define NUMA_NODES_MAX 1024	  /* node numbers accepted from a numa_node file */

/* The sysfs root: ACCELNET_SYSFS_ROOT when set and not empty (tests), else "/sys". */
const char *numa_sysfs_root(void);

/* Parse a cpulist ("0-3,8,10-11", "" for none) of <len> bytes into <out>. 0, -EINVAL
 * (not a list, ranges out of order or overlapping), or -ERANGE (a CPU >= NUMA_CPUS_MAX). */
int numa_parse_cpulist(const char *text, size_t len, cpu_set_t *out);

/* Write <set> as a cpulist ("0-3,8"; "" when empty) into <out>. Its length, or -ENOSPC when
 * <len> bytes cannot hold it (out then holds "").*/
int numa_format_cpulist(const cpu_set_t *set, char *out, size_t len);

/* The node sysfs shows for interface <ifname>'s device, or -1. */
int numa_read_nic_node(const char *ifname);

/* The node of the block device <dev> (a file's st_dev): its disk's (a partition's parent)
 * device, or the nearest device above it that shows one; -1 when none does (virtual and
 * stacked devices: loop, zram, device-mapper, network and memory file systems). */
int numa_read_dev_node(dev_t dev);

/* The CPUs of node <node>. 0, or -errno (-ENOENT: no such node). */
int numa_read_node_cpus(int node, cpu_set_t *out);

/* Nodes online; 1 when sysfs does not say. */
int numa_count_nodes(void);

/*
 * Pure: the CPUs for a thread serving a device on <node>, on a machine of <nodes> nodes whose
 * <node_cpus> and <allowed> CPUs are given. 0 with <out> set, or -ENOENT when nothing is to
 * be pinned: the node unknown (-1), one node, or no allowed CPU on that node.
 */
int numa_choose_cpus(int node, int nodes, const cpu_set_t *node_cpus, const cpu_set_t *allowed,
		     cpu_set_t *out);

/* numa_choose_cpus() on what sysfs and the kernel say: the CPUs of <node> that the process's
 * main thread may run on. 0, or -ENOENT (nothing to pin), or -errno. */
int numa_pick_cpus(int node, cpu_set_t *out);

/* Pin the calling thread to <set> (pthread_setaffinity_np), then read back where it may run
 * into <seen> when not NULL. 0 or -errno. */
int numa_pin_thread(const cpu_set_t *set, cpu_set_t *seen);

#endif
