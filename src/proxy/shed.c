/*
 * shed.c - the accept-time limits (see shed.h).
 */
#include "proxy/shed.h"
#include "core/clock.h"
#include "core/log.h"
#include "runtime/proxy_metric.h"

uint64_t shed_buffer_bytes(const struct worker_shared *sh)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < sh->nworkers; i++) {
		const struct worker *o = &sh->workers[i];
		sum += atomic_load_explicit(&o->bufs.lent_bytes, memory_order_relaxed) +
		       atomic_load_explicit(&o->body_bufs.lent_bytes, memory_order_relaxed);
	}
	return sum;
}

static int shed(struct worker *w, const struct listener *l, enum shed_reason why)
{
	metrics_add(metrics_shard_self(w->rt->metrics), PM_LISTENER_SHED,
		    (size_t)l->index * SHED_REASONS + why, 1);
	return (int)why + 1;
}

int shed_check(struct worker *w, const struct listener *l, uint64_t key, const char *ip,
	       _Atomic uint32_t **ip_slot)
{
	const struct conf_limits *lim = &w->conf->limits;
	struct worker_shared *sh = w->sh;
	*ip_slot = NULL;
	if (lim->max_buffer_memory && sh->workers) {
		uint64_t used = shed_buffer_bytes(sh);
		if (used >= lim->max_buffer_memory) {
			log_warn_every(10000,
				       "buffers hold %llu bytes, limits.max_buffer_memory is %llu: "
				       "new clients are closed until some finish",
				       (unsigned long long)used,
				       (unsigned long long)lim->max_buffer_memory);
			return shed(w, l, SHED_MEMORY);
		}
	}
	if (sh->has_accept_rate &&
	    ratelimit_take(&sh->accept_rate, key, clock_now_ns() / 1000) != 0) {
		log_warn_every(10000, "%s: more than limits.accept_rate_per_ip (%u/%us): closed",
			       ip, lim->accept_rate_per_ip.n, lim->accept_rate_per_ip.per_s);
		return shed(w, l, SHED_ACCEPT_RATE);
	}
	unsigned per_ip = lim->max_connections_per_ip;
	if (per_ip && sh->ip_conns) {
		_Atomic uint32_t *slot = &sh->ip_conns[key % IP_CONN_SLOTS];
		if (atomic_fetch_add_explicit(slot, 1, memory_order_relaxed) >= per_ip) {
			atomic_fetch_sub_explicit(slot, 1, memory_order_relaxed);
			log_warn_every(10000,
				       "%s: more than limits.max_connections_per_ip (%u): refused",
				       ip, per_ip);
			return shed(w, l, SHED_PER_IP);
		}
		*ip_slot = slot;
	}
	return 0;
}
