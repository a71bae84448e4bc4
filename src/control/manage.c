/*
 * manage.c - the admin API's changes to backends and to the proxy (see manage.h).
 *
 * Publishing a new backend in a spare slot follows discovery's protocol (struct backend in
 * runtime/pool.h): the slot is rewritten only while not present and with nothing in flight, and
 * made present last (seq_cst); a pick raises inflight before it reads present. A drain or a
 * disable is one relaxed store: a pick racing with it may still take the backend once, as
 * a request a moment earlier would have. Whatever frees capacity (a backend added or
 * enabled, a larger cap) grants queued requests at once (admission_grant).
 */
#include "control/manage.h"
#include "core/clock.h"
#include "core/log.h"
#include "proxy/admission.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int manage_parse_address(const char *text, struct net_addr *out, char *canon, size_t canon_len,
			 const char **why)
{
	int rc = net_addr_parse_numeric(text, out, why);
	if (rc == 0)
		net_addr_format((const struct sockaddr *)&out->ss, canon, canon_len);
	return rc;
}

/* The port of <a>, and its host as an IPv4 address (mapped ones too) or IPv6 in <host>
 * (16 bytes); the family, AF_INET or AF_INET6. */
static int host_of(const struct sockaddr *sa, uint8_t *host, unsigned *port)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		memcpy(host, &in->sin_addr, 4);
		if (port)
			*port = ntohs(in->sin_port);
		return AF_INET;
	}
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
	if (port)
		*port = ntohs(in6->sin6_port);
	if (memcmp(&in6->sin6_addr, mapped, sizeof(mapped)) == 0) {
		memcpy(host, (const uint8_t *)&in6->sin6_addr + 12, 4);
		return AF_INET;
	}
	memcpy(host, &in6->sin6_addr, 16);
	return AF_INET6;
}

/* Is the host <h> of family <fam> this machine: loopback, unspecified, or an address of one
 * of its interfaces? */
static int host_is_local(int fam, const uint8_t *h)
{
	static const uint8_t zero[16], one[16] = {[15] = 1};
	if (fam == AF_INET && (h[0] == 127 || memcmp(h, zero, 4) == 0))
		return 1;
	if (fam == AF_INET6 && (memcmp(h, zero, 16) == 0 || memcmp(h, one, 16) == 0))
		return 1;
	struct ifaddrs *ifs = NULL;
	int local = 0;
	if (getifaddrs(&ifs) < 0)
		return 0;
	for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
		uint8_t ih[16];
		if (!i->ifa_addr ||
		    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		int ifam = host_of(i->ifa_addr, ih, NULL);
		local = ifam == fam && memcmp(ih, h, fam == AF_INET ? 4 : 16) == 0;
	}
	freeifaddrs(ifs);
	return local;
}

/* Does a connection to <to> reach the socket listening on <own>? */
static int reaches(const struct net_addr *own, const struct net_addr *to)
{
	uint8_t oh[16], th[16];
	static const uint8_t zero[16];
	unsigned op, tp;
	int ofam = host_of((const struct sockaddr *)&own->ss, oh, &op);
	int tfam = host_of((const struct sockaddr *)&to->ss, th, &tp);
	if (op != tp)
		return 0;
	if (memcmp(oh, zero, ofam == AF_INET ? 4 : 16) == 0) /* a wildcard listener */
		return host_is_local(tfam, th);
	if (ofam == tfam && memcmp(oh, th, ofam == AF_INET ? 4 : 16) == 0)
		return 1;
	return memcmp(th, zero, tfam == AF_INET ? 4 : 16) == 0 && host_is_local(ofam, oh);
}

/* manage_parse_address(), its reason written into <err> as the API answers it. */
static int parse_or_say(const char *address, struct net_addr *a, char *canon, size_t canon_len,
			char *err, size_t errlen)
{
	const char *why;
	if (manage_parse_address(address, a, canon, canon_len, &why) < 0) {
		snprintf(err, errlen, "address '%.100s': %s", address, why);
		return -EINVAL;
	}
	return 0;
}

int manage_check_address(const struct conf *conf, const char *address, char *err, size_t errlen)
{
	struct net_addr a;
	char canon[64];
	if (parse_or_say(address, &a, canon, sizeof(canon), err, errlen) < 0)
		return -EINVAL;
	for (size_t i = 0; i < conf->nlistens; i++)
		if (reaches(&conf->listens[i].addr, &a)) {
			snprintf(err, errlen,
				 "address %s is this proxy's own listener %s: refused (a backend "
				 "must be another server)",
				 canon, conf->listens[i].address);
			return -EINVAL;
		}
	/* an IPv4-mapped address is a connection to that IPv4 host: judged by the IPv4 blocks
	 * alone (not let in by an IPv6 block such as ::/0) */
	struct sockaddr_storage judged = a.ss;
	uint8_t host[16];
	unsigned port;
	if (a.ss.ss_family == AF_INET6 &&
	    host_of((const struct sockaddr *)&a.ss, host, &port) == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&judged;
		memset(&judged, 0, sizeof(judged));
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		memcpy(&in->sin_addr, host, 4);
	}
	if (conf->nadmin_backend_networks &&
	    !net_cidr_match(conf->admin_backend_networks, conf->nadmin_backend_networks,
			    (const struct sockaddr *)&judged)) {
		snprintf(err, errlen,
			 "address %s is outside admin.backend_networks: refused (the config "
			 "says where added backends may be)",
			 canon);
		return -EINVAL;
	}
	if (conf->has_admin && reaches(&conf->admin.addr, &a)) {
		snprintf(
		    err, errlen,
		    "address %s is this proxy's own admin endpoint: refused (a backend must be "
		    "another server)",
		    canon);
		return -EINVAL;
	}
	return 0;
}

struct pool_rt *manage_pool(struct runtime *rt, const char *name)
{
	for (size_t i = 0; i < rt->npools; i++)
		if (strcmp(rt->pools[i].conf->name, name) == 0)
			return &rt->pools[i];
	return NULL;
}

const char *manage_address(const struct backend *b)
{
	if (b->source != BACKEND_FROM_DNS)
		return b->name;
	return b->addr_text[atomic_load_explicit(&b->addr_at, memory_order_acquire) & 1];
}

struct backend *manage_find(struct pool_rt *p, const char *address)
{
	struct net_addr a;
	char canon[64];
	const char *why;
	int numeric = manage_parse_address(address, &a, canon, sizeof(canon), &why) == 0;
	for (size_t i = 0; i < p->nbackends; i++) {
		struct backend *b = &p->backends[i];
		if (backend_slot_free(b) || (b->source == BACKEND_FROM_DNS && !backend_present(b)))
			continue;
		if (strcmp(manage_address(b), address) == 0 ||
		    (numeric && b->source != BACKEND_FROM_DNS && net_addr_same(&b->addr, &a)))
			return b;
	}
	return NULL;
}

int manage_state_of(const char *name)
{
	static const char *const names[BACKEND_STATES] = {
	    [BACKEND_ENABLED] = "enabled",
	    [BACKEND_DRAINING] = "draining",
	    [BACKEND_DISABLED] = "disabled",
	};
	for (int i = 0; i < BACKEND_STATES; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

/* Refuse a change to a backend discovery manages. */
static int refuse_dns(const struct pool_rt *p, const struct backend *b, char *err, size_t errlen)
{
	if (b->source != BACKEND_FROM_DNS)
		return 0;
	snprintf(err, errlen,
		 "backend %s of pool %s is found by DNS (backends.discover): its name's answer "
		 "manages it",
		 manage_address(b), p->conf->name);
	return -EPERM;
}

static void grant(struct pool_rt *p)
{
	uint64_t now = clock_now_ms();
	admission_grant(p, now, now ^ (uint64_t)(uintptr_t)p);
}

/* Make free spare slot <b> the backend at <a> (canonical text <canon>), as new. */
static void slot_fill(struct backend *b, const struct net_addr *a, const char *canon,
		      unsigned weight, unsigned cap)
{
	snprintf(b->name, sizeof(b->name), "%s", canon);
	atomic_store(&b->max_conc, cap);
	atomic_store(&b->admin, BACKEND_ENABLED);
	b->api_set = 0;
	backend_fill(b, a, canon, weight, clock_now_ms());
}

int manage_add(struct pool_rt *p, const char *address, unsigned weight, unsigned cap,
	       const char *who, struct backend **out, char *err, size_t errlen)
{
	struct net_addr a;
	char canon[64];
	if (parse_or_say(address, &a, canon, sizeof(canon), err, errlen) < 0)
		return -EINVAL;
	struct backend *b = manage_find(p, canon);
	if (!b)
		b = manage_find(p, address);
	if (b && (b->source == BACKEND_FROM_DNS || backend_present(b))) {
		snprintf(err, errlen, "pool %s has backend %s already", p->conf->name,
			 manage_address(b));
		return -EEXIST;
	}
	if (!weight)
		weight = b && b->source == BACKEND_FROM_CONFIG ? b->conf->weight : 1;
	if (cap == MANAGE_CAP_DEFAULT)
		cap = b && b->source == BACKEND_FROM_CONFIG ? b->conf->max_concurrency : 0;
	if (weight > MANAGE_WEIGHT_MAX || cap > MANAGE_CAP_MAX) {
		snprintf(err, errlen, "weight must be 1 to %d and max_concurrency 0 to %d",
			 MANAGE_WEIGHT_MAX, MANAGE_CAP_MAX);
		return -EINVAL;
	}
	if (b) { /* removed (or being removed): it comes back */
		atomic_store(&b->weight, weight);
		atomic_store(&b->max_conc, cap);
		if (b->source == BACKEND_FROM_CONFIG) {
			b->api_set &= ~(unsigned)MANAGE_SET_REMOVED;
			b->api_set |= (weight != b->conf->weight ? MANAGE_SET_WEIGHT : 0) |
				      (cap != b->conf->max_concurrency ? MANAGE_SET_CAP : 0);
		}
		atomic_fetch_add(&b->gen, 1);
		atomic_store_explicit(&b->present, 1, memory_order_seq_cst);
		log_info("admin: %s: pool %s: backend %s added back (weight %u, max_concurrency "
			 "%u)",
			 who, p->conf->name, manage_address(b), weight, cap);
		goto done;
	}
	size_t spare = 0;
	for (size_t i = 0; i < p->nbackends && !b; i++) {
		spare += p->backends[i].source == BACKEND_FROM_API;
		if (backend_slot_free(&p->backends[i]))
			b = &p->backends[i];
	}
	if (!b) {
		snprintf(err, errlen,
			 "pool %s has no free slot for another backend (pools[].spare_backends: "
			 "%zu, each in use or still draining); raise spare_backends in the config",
			 p->conf->name, spare);
		return -ENOSPC;
	}
	slot_fill(b, &a, canon, weight, cap);
	log_info("admin: %s: pool %s: backend %s added (weight %u, max_concurrency %u)", who,
		 p->conf->name, b->name, weight, cap);
done:
	grant(p);
	*out = b;
	return 0;
}

int manage_remove(struct pool_rt *p, struct backend *b, const char *who, char *err, size_t errlen)
{
	int rc = refuse_dns(p, b, err, errlen);
	if (rc < 0)
		return rc;
	if (!backend_present(b)) {
		snprintf(err, errlen, "backend %s of pool %s is removed already", b->name,
			 p->conf->name);
		return -EALREADY;
	}
	atomic_store_explicit(&b->present, 0, memory_order_seq_cst);
	atomic_fetch_add(&b->gen, 1); /* its idle connections close */
	if (b->source == BACKEND_FROM_CONFIG)
		b->api_set |= MANAGE_SET_REMOVED;
	log_info("admin: %s: pool %s: backend %s removed (%u requests in flight finish)", who,
		 p->conf->name, b->name, atomic_load(&b->share->inflight));
	return 0;
}

int manage_set_state(struct pool_rt *p, struct backend *b, int st, const char *who, char *err,
		     size_t errlen)
{
	static const char *const names[BACKEND_STATES] = {"enabled", "draining", "disabled"};
	int rc = refuse_dns(p, b, err, errlen);
	if (rc < 0)
		return rc;
	if (st < 0 || st >= BACKEND_STATES) {
		snprintf(err, errlen, "state must be enabled, draining or disabled");
		return -EINVAL;
	}
	if (!backend_present(b)) {
		snprintf(err, errlen, "backend %s of pool %s is removed: add it again first",
			 b->name, p->conf->name);
		return -EALREADY;
	}
	int old = atomic_exchange(&b->admin, st);
	if (st == BACKEND_DISABLED)
		atomic_fetch_add(&b->gen, 1); /* its idle connections close */
	if (b->source == BACKEND_FROM_CONFIG) {
		if (st == BACKEND_ENABLED)
			b->api_set &= ~(unsigned)MANAGE_SET_STATE;
		else
			b->api_set |= MANAGE_SET_STATE;
	}
	log_info("admin: %s: pool %s: backend %s: %s -> %s (%u requests in flight)", who,
		 p->conf->name, b->name, names[old % BACKEND_STATES], names[st],
		 atomic_load(&b->share->inflight));
	if (st == BACKEND_ENABLED && old != BACKEND_ENABLED) {
		backend_came_back(b, clock_now_ms()); /* slow start, when the pool has one */
		grant(p);
	}
	return 0;
}

int manage_set_weight(struct pool_rt *p, struct backend *b, unsigned weight, const char *who,
		      char *err, size_t errlen)
{
	int rc = refuse_dns(p, b, err, errlen);
	if (rc < 0)
		return rc;
	if (weight < 1 || weight > MANAGE_WEIGHT_MAX) {
		snprintf(err, errlen, "weight must be 1 to %d", MANAGE_WEIGHT_MAX);
		return -EINVAL;
	}
	if (p->conf->balance->prepare) {
		snprintf(err, errlen,
			 "pool %s: balance %s fixes its weights at load; change them in the "
			 "config",
			 p->conf->name, p->conf->balance->name);
		return -EOPNOTSUPP;
	}
	unsigned old = atomic_exchange(&b->weight, weight);
	if (b->source == BACKEND_FROM_CONFIG) {
		if (weight == b->conf->weight)
			b->api_set &= ~(unsigned)MANAGE_SET_WEIGHT;
		else
			b->api_set |= MANAGE_SET_WEIGHT;
	}
	log_info("admin: %s: pool %s: backend %s: weight %u -> %u", who, p->conf->name, b->name,
		 old, weight);
	return 0;
}

int manage_set_cap(struct pool_rt *p, struct backend *b, unsigned cap, const char *who, char *err,
		   size_t errlen)
{
	int rc = refuse_dns(p, b, err, errlen);
	if (rc < 0)
		return rc;
	if (cap > MANAGE_CAP_MAX) {
		snprintf(err, errlen, "max_concurrency must be 0 (no cap) to %d", MANAGE_CAP_MAX);
		return -EINVAL;
	}
	unsigned old = atomic_exchange(&b->max_conc, cap);
	if (b->source == BACKEND_FROM_CONFIG) {
		if (cap == b->conf->max_concurrency)
			b->api_set &= ~(unsigned)MANAGE_SET_CAP;
		else
			b->api_set |= MANAGE_SET_CAP;
	}
	log_info("admin: %s: pool %s: backend %s: max_concurrency %u -> %u (%u in flight)", who,
		 p->conf->name, b->name, old, cap, atomic_load(&b->share->inflight));
	if (!cap || (old && cap > old))
		grant(p); /* more slots: queued requests take them now */
	return 0;
}

int manage_set_maintenance(struct runtime *rt, unsigned retry_s, const char *who, char *err,
			   size_t errlen)
{
	if (retry_s > MANAGE_RETRY_MAX) {
		snprintf(err, errlen, "retry_after_s must be 1 to %d", MANAGE_RETRY_MAX);
		return -EINVAL;
	}
	unsigned old = atomic_exchange(&rt->maintenance, retry_s);
	if (retry_s)
		log_info("admin: %s: maintenance %s: new requests are answered 503 (Retry-After: "
			 "%u)",
			 who, old ? "still on" : "on", retry_s);
	else
		log_info("admin: %s: maintenance %s", who, old ? "off" : "off already");
	return 0;
}
