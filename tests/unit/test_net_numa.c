/*
 * test_net_numa.c - NUMA placement (net/numa.h) on a fake sysfs tree built here: two nodes
 * (cpulists "0,2" and "1,3"), a NIC on node 1, a disk on node 0 behind a virtio device (its
 * node on the PCI function above), a partition of it, a disk with none; the CPUs chosen for a
 * device on node 1 within what the process may use; and the cpulist parser on good lists and
 * hostile ones (signs, spaces, leading zeros, reversed or overlapping ranges, CPUs past
 * NUMA_CPUS_MAX, numbers that overflow, stray bytes), with each list written back as read;
 * hostile files where sysfs has attributes (a FIFO, a directory, a device, a symlink loop, a
 * file too large, no newline) read as "no node", never a hang (an alarm would end the test).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "net/numa.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static char root[64];

/* mkdir -p the directory <path> lies in */
static void mkparent(const char *path)
{
	char cmd[320];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s", path);
	*strrchr(cmd, '/') = 0;
	strcat(cmd, "'");
	assert_int_equal(system(cmd), 0);
}

static void put(const char *rel, const char *text)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	mkparent(path);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void link_to(const char *rel, const char *target)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	mkparent(path);
	assert_int_equal(symlink(target, path), 0);
}

#define PCI "devices/pci0000:00/0000:00:04.0"

static int tree_up(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/test_net_numa.XXXXXX");
	assert_non_null(mkdtemp(root));
	put("devices/system/node/online", "0-1\n");
	put("devices/system/node/node0/cpulist", "0,2\n");
	put("devices/system/node/node1/cpulist", "1,3\n");
	put(PCI "/numa_node", "1\n"); /* the NIC's PCI function */
	link_to("class/net/eth9/device", "../../../" PCI);
	put("devices/pci0000:00/0000:00:05.0/numa_node", "0\n");
	put("devices/pci0000:00/0000:00:05.0/virtio3/block/vdz/vdz1/partition", "1\n");
	link_to("devices/pci0000:00/0000:00:05.0/virtio3/block/vdz/device", "../../../virtio3");
	link_to("dev/block/254:7", "../../devices/pci0000:00/0000:00:05.0/virtio3/block/vdz");
	link_to("dev/block/254:8", "../../devices/pci0000:00/0000:00:05.0/virtio3/block/vdz/vdz1");
	put("devices/virtual/block/zram9/size", "0\n"); /* no device link */
	link_to("dev/block/253:9", "../../devices/virtual/block/zram9");
	/* a disk whose device link leads out of the tree is not followed */
	link_to("devices/virtual/block/evil/device", "/sys/devices/system");
	link_to("dev/block/253:10", "../../devices/virtual/block/evil");
	setenv("ACCELNET_SYSFS_ROOT", root, 1);
	return 0;
}

static int tree_down(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
	unsetenv("ACCELNET_SYSFS_ROOT");
	return 0;
}

static cpu_set_t set_of(const char *list)
{
	cpu_set_t s;
	assert_int_equal(numa_parse_cpulist(list, strlen(list), &s), 0);
	return s;
}

static void assert_set(const cpu_set_t *s, const char *want)
{
	char got[256];
	assert_true(numa_format_cpulist(s, got, sizeof(got)) >= 0);
	assert_string_equal(got, want);
}

static void reads_the_fake_tree(void **state)
{
	(void)state;
	cpu_set_t cpus;
	assert_string_equal(numa_sysfs_root(), root);
	assert_int_equal(numa_count_nodes(), 2);
	assert_int_equal(numa_read_nic_node("eth9"), 1);
	assert_int_equal(numa_read_nic_node("lo"), -1);
	assert_int_equal(numa_read_nic_node(".."), -1);
	assert_int_equal(numa_read_nic_node("../eth9"), -1);
	assert_int_equal(numa_read_node_cpus(1, &cpus), 0);
	assert_set(&cpus, "1,3");
	assert_int_equal(numa_read_node_cpus(2, &cpus), -ENOENT);
	assert_int_equal(numa_read_node_cpus(-1, &cpus), -ENOENT);
	/* the disk: virtio3 shows no node, the PCI function above it does */
	assert_int_equal(numa_read_dev_node(makedev(254, 7)), 0);
	assert_int_equal(numa_read_dev_node(makedev(254, 8)), 0); /* its partition */
	assert_int_equal(numa_read_dev_node(makedev(253, 9)), -1);
	assert_int_equal(numa_read_dev_node(makedev(253, 10)), -1);
	assert_int_equal(numa_read_dev_node(makedev(1, 99)), -1);
}

static void chooses_the_nics_node_within_what_is_allowed(void **state)
{
	(void)state;
	cpu_set_t node = set_of("1,3"), out;
	cpu_set_t all = set_of("0-3"), two = set_of("0-1"), even = set_of("0,2");
	assert_int_equal(numa_choose_cpus(1, 2, &node, &all, &out), 0);
	assert_set(&out, "1,3");
	assert_int_equal(numa_choose_cpus(1, 2, &node, &two, &out), 0); /* taskset -c 0-1 */
	assert_set(&out, "1");
	assert_int_equal(numa_choose_cpus(1, 2, &node, &even, &out), -ENOENT); /* none of it */
	assert_int_equal(numa_choose_cpus(-1, 2, &node, &all, &out), -ENOENT); /* not shown */
	assert_int_equal(numa_choose_cpus(1, 1, &node, &all, &out), -ENOENT);  /* one node */
	/* on what the tree and the kernel say: node 1's CPUs that this process may use */
	cpu_set_t allowed, want;
	assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	CPU_AND(&want, &node, &allowed);
	if (CPU_COUNT(&want)) {
		assert_int_equal(numa_pick_cpus(1, &out), 0);
		assert_true(CPU_EQUAL(&out, &want));
	} else {
		assert_int_equal(numa_pick_cpus(1, &out), -ENOENT);
	}
	assert_int_equal(numa_pick_cpus(-1, &out), -ENOENT);
}

static void one_node_pins_nothing(void **state)
{
	(void)state;
	cpu_set_t out;
	put("devices/system/node/online", "0\n");
	assert_int_equal(numa_count_nodes(), 1);
	assert_int_equal(numa_pick_cpus(1, &out), -ENOENT);
	put("devices/system/node/online", "garbage\n");
	assert_int_equal(numa_count_nodes(), 1);
	put("devices/system/node/online", "0-1\n");
}

static void parses_good_lists(void **state)
{
	(void)state;
	static const char *const good[][2] = {
	    {"0", "0"},		{"0-3", "0-3"},		{"0-3,8-11", "0-3,8-11"},
	    {"1,3", "1,3"},	{"1,3\n", "1,3"},	{"", ""},
	    {"\n", ""},		{"5-5", "5"},		{"0,1,2,4", "0-2,4"},
	    {"0-1,2-3", "0-3"}, {"1023", "1023"},	{"0-1023", "0-1023"},
	    {"10,20", "10,20"}, {"0-0,1-1,2-2", "0-2"},
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		cpu_set_t s;
		assert_int_equal(numa_parse_cpulist(good[i][0], strlen(good[i][0]), &s), 0);
		assert_set(&s, good[i][1]);
	}
}

static void refuses_hostile_lists(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    ",",
	    "0,",
	    ","
	    "0",
	    "0,,1",
	    "-1",
	    "0-",
	    "-",
	    "1-0",
	    "3,1",
	    "0-3,2",
	    "0-3,3",
	    " 0",
	    "0 ",
	    "0\n\n",
	    "+1",
	    "01",
	    "0x1",
	    "1a",
	    "0;1",
	    "0-3-5",
	    "\n0",
	    "0\t",
	    "a",
	    "0-1,",
	    "0-1,\n",
	    "00",
	    "1:2",
	    "0-7:2/4",
	    "\xff",
	    "0\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cpu_set_t s;
		int rc = numa_parse_cpulist(bad[i], strlen(bad[i]), &s);
		if (rc != -EINVAL)
			fail_msg("'%s' gave %d", bad[i], rc);
	}
	static const char *const range[] = {"1024", "0-1024", "99999999999999999999",
					    "0-4294967296", "18446744073709551617"};
	for (size_t i = 0; i < sizeof(range) / sizeof(range[0]); i++) {
		cpu_set_t s;
		assert_int_equal(numa_parse_cpulist(range[i], strlen(range[i]), &s), -ERANGE);
	}
	/* a NUL inside the given length is a stray byte, not an end */
	cpu_set_t s;
	assert_int_equal(numa_parse_cpulist("1\0"
					    "2",
					    3, &s),
			 -EINVAL);
}

/* Hostile files where sysfs has attributes: each read as "no node" (or refused), at once. A
 * FIFO with no writer blocked open(2) forever before (the alarm ends the test then). */
static void hostile_files_are_no_node(void **state)
{
	(void)state;
	char path[256], big[16384];
	cpu_set_t cpus;
	alarm(20);
	snprintf(path, sizeof(path), "%s/class/net/fifo0/device/numa_node", root);
	mkparent(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(numa_read_nic_node("fifo0"), -1);
	snprintf(path, sizeof(path), "%s/class/net/dir0/device/numa_node/x", root);
	mkparent(path); /* numa_node a directory */
	assert_int_equal(numa_read_nic_node("dir0"), -1);
	link_to("class/net/dev0/device/numa_node", "/dev/zero");
	assert_int_equal(numa_read_nic_node("dev0"), -1);
	link_to("class/net/loop0/device/numa_node", "numa_node"); /* a link to itself */
	assert_int_equal(numa_read_nic_node("loop0"), -1);
	memset(big, '1', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	put("class/net/big0/device/numa_node", big);
	assert_int_equal(numa_read_nic_node("big0"), -1);
	put("class/net/nonl0/device/numa_node", "1"); /* no newline: still a node */
	assert_int_equal(numa_read_nic_node("nonl0"), 1);
	/* a node's cpulist and the online list as FIFOs: refused, never waited on */
	snprintf(path, sizeof(path), "%s/devices/system/node/node5/cpulist", root);
	mkparent(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(numa_read_node_cpus(5, &cpus), -EINVAL);
	snprintf(path, sizeof(path), "%s/devices/system/node/online", root);
	char moved[272];
	snprintf(moved, sizeof(moved), "%s.real", path);
	assert_int_equal(rename(path, moved), 0);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(numa_count_nodes(), 1); /* unknown: one node, nothing pinned */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rename(moved, path), 0);
	assert_int_equal(numa_count_nodes(), 2);
	alarm(0);
}

static void formats_within_its_room(void **state)
{
	(void)state;
	cpu_set_t s = set_of("0,2,4,6,8,10");
	char small[6];
	assert_int_equal(numa_format_cpulist(&s, small, sizeof(small)), -ENOSPC);
	assert_string_equal(small, "");
	char room[16];
	assert_int_equal(numa_format_cpulist(&s, room, sizeof(room)), 12);
	assert_string_equal(room, "0,2,4,6,8,10");
}

static void pins_the_calling_thread(void **state)
{
	(void)state;
	cpu_set_t before, one, seen;
	assert_int_equal(sched_getaffinity(0, sizeof(before), &before), 0);
	CPU_ZERO(&one);
	for (int c = 0; c < NUMA_CPUS_MAX; c++)
		if (CPU_ISSET(c, &before)) {
			CPU_SET(c, &one);
			break;
		}
	assert_int_equal(numa_pin_thread(&one, &seen), 0);
	assert_true(CPU_EQUAL(&one, &seen));
	assert_int_equal(numa_pin_thread(&before, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(reads_the_fake_tree),
	    cmocka_unit_test(chooses_the_nics_node_within_what_is_allowed),
	    cmocka_unit_test(one_node_pins_nothing),
	    cmocka_unit_test(parses_good_lists),
	    cmocka_unit_test(refuses_hostile_lists),
	    cmocka_unit_test(hostile_files_are_no_node),
	    cmocka_unit_test(formats_within_its_room),
	    cmocka_unit_test(pins_the_calling_thread),
	};
	return cmocka_run_group_tests(tests, tree_up, tree_down);
}
