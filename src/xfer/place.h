/*
 * place.h - where xfer's threads run: on the NUMA node of the NIC whose bytes they move.
 *
 * On a machine of several nodes, each link's NIC sits on one node: a stream thread on that
 * node's CPUs touches its socket buffers, its chunk buffers and the page cache it sends from
 * or writes to in local memory. So each link plans, once, the CPUs of its NIC's node within
 * those the process may use (net/numa.h), and each of its stream threads pins itself to them
 * as it starts; a receiving side's connection thread (serve, get) pins itself to the node of
 * the NIC its socket's local address is on, before its first read. Nothing is pinned with
 * --numa off, when the NIC shows no node (virtual interfaces, loopback), on a machine of one
 * node, or when no allowed CPU is on it. Threads a pinned thread starts run where it runs (a
 * receiver's finishing threads, the streams answering a get on its connections), but for a
 * bcast relay's streams, which pin themselves to their own link's node.
 *
 * A file read or written on another node than its link's NIC is said once in the log. It is
 * not moved to a thread of the disk's node: with sendfile the stream thread's one system call
 * reads the page cache and queues it to the NIC, and on the receiving side the thread that
 * hashed a chunk writes it; a thread of the disk's node would add a hand-over (a copy, or a
 * queue and a wake-up per chunk) to move the one crossing of the interconnect that remains
 * either way (the disk's DMA to far memory, or the NIC's).
 */
#ifndef ACCELNET_XFER_PLACE_H
#define ACCELNET_XFER_PLACE_H

#include "net/numa.h"
#include "net/route.h"
#include "xfer/source.h"

#include <stdatomic.h>
#include <stddef.h>

#define XFER_PLACE_CPUS_TEXT 128 /* a cpulist as the report carries it */

/* One link's placement: planned once, entered by each of its stream threads. */
struct xfer_place {
	int pin;	/* cpus apply */
	cpu_set_t cpus; /* the NIC's node's CPUs that the process may use */
	/* what the first thread that pinned itself read back, set once (claimed, then ready) */
	_Atomic int claimed, ready;
	char seen[XFER_PLACE_CPUS_TEXT];
};

/* Plan <p> for a link whose NIC is on <node> (-1: not known); nothing to pin when <off>. */
void xfer_place_plan(struct xfer_place *p, int node, int off);

/* The calling thread (one of the link's streams) pins itself as planned. */
void xfer_place_enter(struct xfer_place *p);

/* Where the link's stream threads run, as a cpulist ("" when they are not pinned). */
void xfer_place_cpus(struct xfer_place *p, char *out, size_t len);

/* A receiving connection's thread pins itself to the node of the NIC its socket <fd>'s local
 * address is on (nothing when <off>); files land beneath <dirfd>: a disk on another node
 * than that NIC's is said once in the log. */
void xfer_place_conn(int fd, int dirfd, int off);

/* Files <src> (<n> of them) that link <link> (leaving by <nic>, placed by <p>) sends: a disk on
 * another node than the NIC's is said once in the log, when the link's threads are pinned. */
void xfer_place_check_files(const struct xfer_place *p, const struct xfer_source *src, uint32_t n,
			    const struct net_iface *nic, unsigned link);

#endif
