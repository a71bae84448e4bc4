/*
 * classify.h - what the scheduler needs to know about a request before it waits or is
 * balanced: its tenant and priority class (for the queue's fairness), and its affinity key
 * (for consistent-hash and prefix-affinity balancing).
 *
 * The tenant is a hash of the client address (an IPv6 client's /64), or of the route's
 * tenant_header when the route names one and the request carries it (a header nobody
 * authenticated is not believed by default: a client could invent a tenant per request);
 * only the hash is kept. The priority is the route's, unless the route names a priority
 * header and the request carries a valid class in it. A prompt key comes from the body,
 * later (http/prompt.h).
 */
#ifndef ACCELNET_PROXY_CLASSIFY_H
#define ACCELNET_PROXY_CLASSIFY_H

#include "conf/model.h"
#include "http/parse.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct waiter;

/*
 * Fill in <wt>'s tenant (classify_tenant_of), class and (unless the key is the prompt) key
 * for request <h>, from a client whose address hashes to <client_key> (classify_client_key)
 * and who authenticated as <identity> (NULL: nobody).
 */
void classify_request(const struct conf_route *r, const struct conf_pool *pc,
		      const struct http_head *h, uint64_t client_key, const char *identity,
		      struct waiter *wt);

/* The tenant of request <h> on route <r>: the authenticated <identity> (routes.auth) when
 * there is one, else the route's tenant_header, else the client's address. */
uint64_t classify_tenant_of(const struct conf_route *r, const struct http_head *h,
			    uint64_t client_key, const char *identity);

/*
 * The client address as the tenant and hash key see it: an IPv4 address, or an IPv6 /64
 * (one host is commonly given a /64 and could rotate addresses within it at will).
 */
uint64_t classify_client_key(const struct sockaddr *sa);

#endif
