/*
 * discover.c - the resolution behind discover.h.
 *
 * c-ares runs inside the main loop: its sockets are watched through the socket-state
 * callback (a loop_io each, edge-triggered, so a readable one is read until poll() finds it
 * empty), and one timer drives its retries and timeouts while a query is out. A round for a
 * name is one query (A: ares_getaddrinfo; SRV: ares_query, then ares_getaddrinfo per target)
 * counted in <pending>; when the last finishes, the round's addresses are applied to the
 * name's slots.
 *
 * Publishing an address (struct backend in runtime/pool.h): a slot is rewritten only while not
 * present and with nothing in flight. The main thread clears present (seq_cst) and later
 * sees inflight 0 (seq_cst); pool_pick raises inflight (seq_cst) then reads present: either
 * the pick sees the slot gone and backs off, or this thread sees it busy and waits for a
 * later round. A draining slot is reused once its last request ends.
 */
#include "control/discover.h"
#include "conf/schema_discovery.h"
#include "core/log.h"
#include "proxy/admission.h"
#include "runtime/proxy_metric.h"

#include <ares.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct found {
	struct net_addr a;
	unsigned weight;
	int kept; /* a present slot holds it */
};

struct dname {
	struct discover *d;
	struct pool_rt *pool;
	const struct conf_backend *conf;
	struct backend *slots; /* its nslots backends of the pool */
	size_t nslots;
	struct loop_timer timer; /* the next round */
	unsigned pending;	 /* queries of this round still out */
	int failed;		 /* one of them failed (c-ares' status): keep the last answer */
	uint64_t ttl_ms;	 /* the smallest TTL seen this round */
	struct found *found;	 /* this round's addresses, at most nslots */
	size_t nfound, dropped;
};

/* One ares_getaddrinfo: an A name, or an SRV target with its weight. */
struct target {
	struct dname *dn;
	unsigned weight;
};

struct watch {
	struct loop_io io;
	struct discover *d;
	struct watch *next;
};

struct discover {
	struct loop *loop;
	struct runtime *rt;
	ares_channel ch;
	int ch_ok;
	struct loop_timer tick; /* c-ares' own timeouts while a query is out */
	struct watch *watches;
	struct dname *names;
	size_t n;
};

static struct watch *watch_find(struct discover *d, int fd)
{
	for (struct watch *w = d->watches; w; w = w->next)
		if (w->io.fd == fd)
			return w;
	return NULL;
}

static void tick_arm(struct discover *d)
{
	struct timeval tv;
	if (!ares_timeout(d->ch, NULL, &tv)) {
		loop_timer_stop(d->loop, &d->tick);
		return;
	}
	uint64_t ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000 + 1;
	loop_timer_set(d->loop, &d->tick, loop_now(d->loop) + ms);
}

static void tick_fired(struct loop_timer *t)
{
	struct discover *d = container_of(t, struct discover, tick);
	ares_process_fd(d->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	tick_arm(d);
}

static int fd_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLERR | POLLHUP));
}

static void watch_on_io(struct loop_io *io, unsigned events)
{
	struct discover *d = container_of(io, struct watch, io)->d;
	int fd = io->fd; /* <io> may be freed by what c-ares does below */
	ares_process_fd(d->ch, (events & (LOOP_READ | LOOP_HUP)) ? fd : ARES_SOCKET_BAD,
			(events & LOOP_WRITE) ? fd : ARES_SOCKET_BAD);
	/* edge-triggered: what is left unread would raise no new event */
	for (int i = 0; i < 256 && watch_find(d, fd) && fd_readable(fd); i++)
		ares_process_fd(d->ch, fd, ARES_SOCKET_BAD);
	tick_arm(d);
}

/* c-ares opens, wants or closes a socket. */
static void sock_state(void *arg, ares_socket_t fd, int readable, int writable)
{
	struct discover *d = arg;
	struct watch *w = watch_find(d, fd);
	if (!readable && !writable) {
		if (!w)
			return;
		loop_io_del(d->loop, &w->io);
		for (struct watch **p = &d->watches; *p; p = &(*p)->next)
			if (*p == w) {
				*p = w->next;
				break;
			}
		free(w);
		return;
	}
	if (w)
		return; /* watched for both already */
	if (!(w = calloc(1, sizeof(*w))))
		goto fail;
	w->io.fd = fd;
	w->io.fn = watch_on_io;
	w->d = d;
	if (loop_io_add(d->loop, &w->io) < 0) {
		free(w);
		goto fail;
	}
	w->next = d->watches;
	d->watches = w;
	return;
fail:
	/* its query times out (tick) and the round counts as failed */
	log_warn_every(10000, "discovery: cannot watch a resolver socket");
}

static int addr_same(const struct net_addr *a, const struct net_addr *b)
{
	return a->len == b->len && memcmp(&a->ss, &b->ss, a->len) == 0;
}

static void found_add(struct dname *dn, const struct sockaddr *sa, socklen_t len, unsigned weight)
{
	struct net_addr a = {.len = len};
	if (len > sizeof(a.ss))
		return;
	memcpy(&a.ss, sa, len);
	for (size_t i = 0; i < dn->nfound; i++)
		if (addr_same(&dn->found[i].a, &a))
			return;
	if (dn->nfound == dn->nslots) {
		dn->dropped++; /* more than max_backends: a hostile or huge answer */
		return;
	}
	dn->found[dn->nfound++] = (struct found){.a = a, .weight = weight};
}

static void ttl_seen(struct dname *dn, int ttl)
{
	uint64_t ms = ttl > 0 ? (uint64_t)ttl * 1000 : 0;
	if (ms < dn->ttl_ms)
		dn->ttl_ms = ms;
}

/* Take slot <b> out: no new picks; those in flight finish; idle connections close. */
static void slot_leave(struct dname *dn, struct backend *b)
{
	atomic_store_explicit(&b->present, 0, memory_order_seq_cst);
	atomic_fetch_add(&b->gen, 1);
	log_info("discovery: backend %s (pool %s): %s left %s's answer: drained", b->name,
		 dn->pool->conf->name, b->addr_text[atomic_load(&b->addr_at) & 1],
		 dn->conf->discover_name);
}

/* Give free slot <b> (absent, nothing in flight) the address <f>, as new. */
static void slot_fill(struct dname *dn, struct backend *b, const struct found *f, uint64_t now_ms)
{
	char text[64];
	net_addr_format((const struct sockaddr *)&f->a.ss, text, sizeof(text));
	backend_fill(b, &f->a, text, f->weight, now_ms);
	log_info("discovery: backend %s (pool %s) is %s (weight %u), from %s", b->name,
		 dn->pool->conf->name, text, f->weight, dn->conf->discover_name);
}

static uint64_t clamp_ttl(const struct conf *c, uint64_t ms)
{
	if (ms < c->discovery.min_ttl_ms)
		return c->discovery.min_ttl_ms;
	return ms > c->discovery.max_ttl_ms ? c->discovery.max_ttl_ms : ms;
}

/* The round is over: apply what it found to the slots, and set the next one. */
static void round_apply(struct dname *dn)
{
	const struct conf *c = dn->d->rt->conf;
	uint64_t now = loop_now(dn->d->loop), next;
	if (dn->failed) {
		pool_count(dn->pool, PM_POOL_DISCOVERY_FAILURES, 1);
		log_warn_every(10000,
			       "discovery: %s (pool %s) could not be resolved (%s): the last "
			       "answer is kept",
			       dn->conf->discover_name, dn->pool->conf->name,
			       ares_strerror(dn->failed));
		next = c->discovery.min_ttl_ms;
		goto out;
	}
	pool_count(dn->pool, PM_POOL_DISCOVERY_ANSWERS, 1);
	for (size_t i = 0; i < dn->nslots; i++) {
		struct backend *b = &dn->slots[i];
		if (!backend_present(b))
			continue;
		size_t k = 0;
		while (k < dn->nfound && !addr_same(&dn->found[k].a, &b->addr))
			k++;
		if (k == dn->nfound) {
			slot_leave(dn, b);
			continue;
		}
		dn->found[k].kept = 1;
		atomic_store(&b->weight, dn->found[k].weight);
	}
	size_t s = 0, added = 0;
	for (size_t k = 0; k < dn->nfound; k++) {
		if (dn->found[k].kept)
			continue;
		while (s < dn->nslots &&
		       (backend_present(&dn->slots[s]) ||
			atomic_load_explicit(&dn->slots[s].share->inflight, memory_order_seq_cst)))
			s++; /* in use, or draining: not free yet */
		if (s == dn->nslots) {
			dn->dropped++;
			continue;
		}
		slot_fill(dn, &dn->slots[s++], &dn->found[k], now);
		added++;
	}
	if (dn->dropped) {
		pool_count(dn->pool, PM_POOL_DISCOVERY_DROPPED, dn->dropped);
		log_warn_every(10000,
			       "discovery: %s (pool %s): %zu addresses left out, no free slot "
			       "(max_backends %zu)",
			       dn->conf->discover_name, dn->pool->conf->name, dn->dropped,
			       dn->nslots);
	}
	if (added)
		admission_grant(dn->pool, now, now ^ (uint64_t)(uintptr_t)dn);
	next = dn->ttl_ms == UINT64_MAX ? c->discovery.min_ttl_ms : clamp_ttl(c, dn->ttl_ms);
out:
	loop_timer_set(dn->d->loop, &dn->timer, now + next);
}

/* One query of the round ended. */
static void query_done(struct dname *dn)
{
	if (--dn->pending == 0)
		round_apply(dn);
}

/* A status that is an answer, though an empty one: the name has no such records. */
static int status_empty(int status)
{
	return status == ARES_ENOTFOUND || status == ARES_ENODATA || status == ARES_ENONAME;
}

static void addrinfo_done(void *arg, int status, int timeouts, struct ares_addrinfo *ai)
{
	struct target *t = arg;
	struct dname *dn = t->dn;
	unsigned weight = t->weight;
	(void)timeouts;
	free(t);
	if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED) {
		ares_freeaddrinfo(ai);
		return; /* stopping */
	}
	if (status == ARES_SUCCESS && ai) {
		for (struct ares_addrinfo_node *n = ai->nodes; n; n = n->ai_next) {
			found_add(dn, n->ai_addr, n->ai_addrlen, weight);
			ttl_seen(dn, n->ai_ttl);
		}
	} else if (!status_empty(status)) {
		dn->failed = status;
	}
	ares_freeaddrinfo(ai);
	query_done(dn);
}

static void ask_addresses(struct dname *dn, const char *name, unsigned port, unsigned weight)
{
	struct target *t = malloc(sizeof(*t));
	if (!t) {
		dn->failed = ARES_ENOMEM;
		return;
	}
	*t = (struct target){.dn = dn, .weight = weight};
	char service[8];
	snprintf(service, sizeof(service), "%u", port);
	struct ares_addrinfo_hints hints = {
	    .ai_flags = ARES_AI_NUMERICSERV, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	dn->pending++;
	ares_getaddrinfo(dn->d->ch, name, service, &hints, addrinfo_done, t);
}

static void srv_done(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
	struct dname *dn = arg;
	struct ares_srv_reply *srv = NULL;
	(void)timeouts;
	if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED)
		return;
	if (status == ARES_SUCCESS)
		status = ares_parse_srv_reply(abuf, alen, &srv);
	if (status == ARES_SUCCESS) {
		unsigned best = UINT16_MAX + 1u;
		for (struct ares_srv_reply *r = srv; r; r = r->next)
			if (r->priority < best)
				best = r->priority;
		size_t asked = 0;
		for (struct ares_srv_reply *r = srv; r; r = r->next) {
			if (r->priority != best || !r->port)
				continue;
			if (asked == dn->nslots) {
				dn->dropped++; /* a target more than there are slots */
				continue;
			}
			unsigned w = r->weight ? r->weight : 1;
			ask_addresses(dn, r->host, r->port, w > 1000 ? 1000 : w);
			asked++;
		}
		ares_free_data(srv);
	} else if (!status_empty(status)) {
		dn->failed = status;
	}
	query_done(dn);
}

static void round_start(struct loop_timer *t)
{
	struct dname *dn = container_of(t, struct dname, timer);
	dn->failed = 0;
	dn->nfound = dn->dropped = 0;
	dn->ttl_ms = UINT64_MAX;
	dn->pending = 1; /* the round itself, until its first query is out */
	if (dn->conf->discover == DISCOVER_A) {
		ask_addresses(dn, dn->conf->discover_name, dn->conf->discover_port,
			      dn->conf->weight);
	} else {
		dn->pending++;
		ares_query(dn->d->ch, dn->conf->discover_name, ns_c_in, ns_t_srv, srv_done, dn);
	}
	tick_arm(dn->d);
	query_done(dn);
}

static int discover_channel(struct discover *d)
{
	const struct conf *c = d->rt->conf;
	struct ares_options o = {
	    .sock_state_cb = sock_state,
	    .sock_state_cb_data = d,
	    .timeout = (int)c->discovery.timeout_ms,
	    .tries = 2,
	    .lookups = (char *)"b", /* DNS only: a name in /etc/hosts is not discovery */
	};
	int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
	int rc = ares_library_init(ARES_LIB_INIT_ALL);
	if (rc == ARES_SUCCESS)
		rc = ares_init_options(&d->ch, &o, mask);
	if (rc != ARES_SUCCESS) {
		log_error("discovery: cannot start the resolver: %s", ares_strerror(rc));
		return -ENOMEM;
	}
	d->ch_ok = 1;
	if (c->discovery.resolvers &&
	    (rc = ares_set_servers_ports_csv(d->ch, c->discovery.resolvers)) != ARES_SUCCESS) {
		log_error("discovery: resolvers %s: %s", c->discovery.resolvers, ares_strerror(rc));
		return -EINVAL;
	}
	return 0;
}

int discover_start(struct loop *loop, struct runtime *rt, struct discover **out)
{
	size_t n = 0;
	*out = NULL;
	for (size_t i = 0; i < rt->npools; i++)
		for (size_t j = 0; j < rt->pools[i].conf->nbackends; j++)
			n += rt->pools[i].conf->backends[j].discover != DISCOVER_NONE;
	if (!n)
		return 0;
	struct discover *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	d->rt = rt;
	d->tick.fn = tick_fired;
	int rc = -ENOMEM;
	if (!(d->names = calloc(n, sizeof(*d->names))))
		goto fail;
	for (size_t i = 0; i < rt->npools; i++) {
		struct pool_rt *p = &rt->pools[i];
		for (size_t j = 0; j < p->nbackends;) {
			const struct conf_backend *cb = p->backends[j].conf;
			size_t k = j;
			while (k < p->nbackends && p->backends[k].conf == cb)
				k++;
			if (cb->discover) {
				struct dname *dn = &d->names[d->n++];
				*dn = (struct dname){.d = d,
						     .pool = p,
						     .conf = cb,
						     .slots = &p->backends[j],
						     .nslots = k - j};
				dn->timer.fn = round_start;
				if (!(dn->found = calloc(dn->nslots, sizeof(*dn->found))))
					goto fail;
			}
			j = k;
		}
	}
	if ((rc = discover_channel(d)) < 0)
		goto fail;
	for (size_t i = 0; i < d->n; i++)
		loop_timer_set(loop, &d->names[i].timer, loop_now(loop)); /* at once */
	*out = d;
	return 0;
fail:
	discover_stop(d);
	return rc;
}

void discover_stop(struct discover *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++)
		loop_timer_stop(d->loop, &d->names[i].timer);
	loop_timer_stop(d->loop, &d->tick);
	if (d->ch_ok) {
		ares_destroy(d->ch); /* queries end with ARES_EDESTRUCTION */
		ares_library_cleanup();
	}
	while (d->watches) {
		struct watch *w = d->watches;
		d->watches = w->next;
		loop_io_del(d->loop, &w->io);
		free(w);
	}
	for (size_t i = 0; i < d->n; i++)
		free(d->names[i].found);
	free(d->names);
	free(d);
}
