/*
 * place.c - xfer's threads on their NIC's NUMA node (see place.h).
 */
#include "xfer/place.h"

#include "core/log.h"
#include "net/addr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* a disk on another node than its link's NIC: said once per process */
static _Atomic int far_said;

void xfer_place_plan(struct xfer_place *p, int node, int off)
{
	memset(p, 0, sizeof(*p));
	p->pin = !off && numa_pick_cpus(node, &p->cpus) == 0;
}

void xfer_place_enter(struct xfer_place *p)
{
	cpu_set_t seen;
	if (!p->pin)
		return;
	int rc = numa_pin_thread(&p->cpus, &seen);
	if (rc) {
		log_warn_every(60000, "xfer: cannot pin a stream thread to its NIC's CPUs: %s",
			       strerror(-rc));
		return;
	}
	if (atomic_exchange(&p->claimed, 1))
		return;
	numa_format_cpulist(&seen, p->seen, sizeof(p->seen));
	atomic_store_explicit(&p->ready, 1, memory_order_release);
}

void xfer_place_cpus(struct xfer_place *p, char *out, size_t len)
{
	if (atomic_load_explicit(&p->ready, memory_order_acquire))
		snprintf(out, len, "%s", p->seen);
	else if (len)
		out[0] = 0;
}

/* Whether this is the first time a disk on another node is seen: it is said once. */
static int far_first(void)
{
	return !atomic_exchange(&far_said, 1);
}

void xfer_place_conn(int fd, int dirfd, int off)
{
	struct net_addr local = {.len = sizeof(local.ss)};
	struct net_iface nic;
	cpu_set_t cpus;
	struct stat st;
	/* one node (most machines): not even the interface is looked up */
	if (off || numa_count_nodes() <= 1 ||
	    getsockname(fd, (struct sockaddr *)&local.ss, &local.len) < 0 ||
	    net_iface_of(&local, &nic) < 0 || numa_pick_cpus(nic.numa_node, &cpus))
		return;
	int rc = numa_pin_thread(&cpus, NULL);
	if (rc) {
		log_warn_every(60000,
			       "xfer serve: cannot pin a connection's thread to its NIC's "
			       "CPUs: %s",
			       strerror(-rc));
		return;
	}
	if (atomic_load(&far_said) || fstat(dirfd, &st) < 0)
		return;
	int disk = numa_read_dev_node(st.st_dev);
	if (disk >= 0 && disk != nic.numa_node && far_first())
		log_warn("xfer serve: files land on a disk (device %u:%u) of NUMA node %d, through "
			 "%s on node %d: the bytes cross between the nodes (the connections' "
			 "threads run on the NIC's)",
			 major(st.st_dev), minor(st.st_dev), disk, nic.name, nic.numa_node);
}

void xfer_place_check_files(const struct xfer_place *p, const struct xfer_source *src, uint32_t n,
			    const struct net_iface *nic, unsigned link)
{
	uint64_t last = 0;
	if (!p->pin)
		return;
	for (uint32_t i = 0; i < n && !atomic_load(&far_said); i++) {
		if (!src[i].dev || src[i].dev == last)
			continue;
		last = src[i].dev;
		int disk = numa_read_dev_node((dev_t)last);
		if (disk >= 0 && disk != nic->numa_node && far_first())
			log_warn(
			    "xfer: files on a disk (device %u:%u) of NUMA node %d go by link "
			    "%u, through %s on node %d: the bytes cross between the nodes (its "
			    "stream threads run on the NIC's)",
			    major((dev_t)last), minor((dev_t)last), disk, link + 1, nic->name,
			    nic->numa_node);
	}
}
