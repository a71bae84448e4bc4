/*
 * classify.c - tenant, priority class and affinity key of a request (see classify.h).
 */
#include "proxy/classify.h"
#include "lb/qdisc.h"
#include "proxy/queue.h"

#include <string.h>
#include <strings.h>
#include <xxhash.h>

static uint64_t hash_str(struct http_str v)
{
	return XXH3_64bits(v.p, v.len);
}

void classify_request(const struct conf_route *r, const struct conf_pool *pc,
		      const struct http_head *h, const char *client_ip, struct waiter *wt)
{
	wt->item.tenant = 0;
	wt->item.prio = r->priority;
	if (pc->can_queue || r->has_spill) { /* only a queue reads them */
		/* a header's value names the tenant only where the route says so: a value
		 * nobody has authenticated is whatever the client invents, and rotating it
		 * would buy one client a lane per value */
		const struct http_header *t =
		    r->tenant_header ? http_find_header(h, r->tenant_header) : NULL;
		wt->item.tenant =
		    t ? hash_str(t->value) : XXH3_64bits(client_ip, strlen(client_ip));
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
		wt->key = XXH3_64bits(client_ip, strlen(client_ip));
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
		break; /* from the body, once it is read: classify_prompt() */
	}
}
