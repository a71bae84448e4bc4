/*
 * classify.c - tenant, priority class and affinity key of a request (see classify.h).
 */
#include "proxy/classify.h"
#include "policy/qdisc.h"
#include "runtime/queue.h"

#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

static uint64_t hash_str(struct http_str v)
{
	return XXH3_64bits(v.p, v.len);
}

uint64_t classify_tenant_of(const struct conf_route *r, const struct http_head *h,
			    uint64_t client_key, const char *identity)
{
	if (identity)
		return XXH3_64bits(identity, strlen(identity));
	/* a header's value names the tenant only where the route says so: a value nobody has
	 * authenticated is whatever the client invents, and rotating it would buy one client a
	 * lane per value */
	const struct http_header *t =
	    r->tenant_header ? http_find_header(h, r->tenant_header) : NULL;
	return t ? hash_str(t->value) : client_key;
}

void classify_request(const struct conf_route *r, const struct conf_pool *pc,
		      const struct http_head *h, uint64_t client_key, const char *identity,
		      struct waiter *wt)
{
	wt->item.tenant = 0;
	wt->item.prio = r->priority;
	if (pc->can_queue || r->has_spill) { /* only a queue reads them */
		wt->item.tenant = classify_tenant_of(r, h, client_key, identity);
		const struct http_header *p =
		    r->priority_header ? http_find_header(h, r->priority_header) : NULL;
		int c = p ? qdisc_priority(p->value.p, p->value.len) : -1;
		if (c >= 0)
			wt->item.prio = (unsigned)c;
	}

	wt->has_key = 0;
	if (!pc->balance->keyed)
		return;
	switch (pc->hash.key) {
	case HASH_KEY_CLIENT_IP:
		wt->key = client_key;
		wt->has_key = 1;
		break;
	case HASH_KEY_PATH:
		wt->key = hash_str(h->path);
		wt->has_key = 1;
		break;
	case HASH_KEY_HEADER: {
		const struct http_header *k = http_find_header(h, pc->hash.header);
		if (k) {
			wt->key = hash_str(k->value);
			wt->has_key = 1;
		}
		break;
	}
	case HASH_KEY_PROMPT:
		break; /* from the body, once it is read (relay_await_body, http_prompt_key) */
	}
}

uint64_t classify_client_key(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a))
			return XXH3_64bits(a->s6_addr + 12, 4);
		return XXH3_64bits(a->s6_addr, 8); /* the /64: one host's block */
	}
	if (sa->sa_family == AF_INET)
		return XXH3_64bits(&((const struct sockaddr_in *)sa)->sin_addr, 4);
	return 0;
}
