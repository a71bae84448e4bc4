/*
 * lora.c - the simulated accelerator's adapter table (see lora.h): a small array searched by
 * name, the least recently used loaded adapter evicted, the label sets of the info gauge kept
 * in a short history.
 */
#include "sim/lora.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int add(struct sim_loras *l, const char *name, size_t n)
{
	if (!n || n >= SIM_LORA_NAME)
		return -EINVAL;
	for (unsigned i = 0; i < l->n; i++)
		if (strlen(l->a[i].name) == n && !memcmp(l->a[i].name, name, n))
			return (int)i;
	unsigned at = l->n;
	if (at == SIM_LORA_MAX) { /* an entry neither loaded nor asked for makes room */
		for (at = 0; at < l->n; at++)
			if (!l->a[at].loaded && !l->a[at].running && !l->a[at].waiting)
				break;
		if (at == l->n)
			return -ENOSPC;
	} else
		l->n++;
	memset(&l->a[at], 0, sizeof(l->a[at]));
	memcpy(l->a[at].name, name, n);
	return (int)at;
}

int sim_lora_init(struct sim_loras *l, const char *names, unsigned max, unsigned load_ms)
{
	memset(l, 0, sizeof(*l));
	l->max = max;
	l->load_ms = load_ms;
	for (const char *p = names; p && *p;) {
		size_t n = strcspn(p, ",");
		int i = add(l, p, n);
		if (i < 0)
			return -EINVAL;
		if (!l->a[i].loaded) {
			unsigned loaded = 0;
			for (unsigned k = 0; k < l->n; k++)
				loaded += l->a[k].loaded;
			if (loaded == max)
				return -EINVAL;
			l->a[i].loaded = 1;
		}
		p += n + (p[n] == ',');
	}
	return 0;
}

int sim_lora_get(struct sim_loras *l, const char *name)
{
	return add(l, name, strlen(name));
}

static unsigned distinct_running(const struct sim_loras *l)
{
	unsigned r = 0;
	for (unsigned i = 0; i < l->n; i++)
		r += l->a[i].running > 0;
	return r;
}

int sim_lora_fits(const struct sim_loras *l, int i)
{
	return l->a[i].running > 0 || distinct_running(l) < l->max;
}

void sim_lora_queued(struct sim_loras *l, int i)
{
	l->a[i].waiting++;
	l->a[i].requests++;
}

void sim_lora_unqueued(struct sim_loras *l, int i)
{
	if (l->a[i].waiting)
		l->a[i].waiting--;
}

unsigned sim_lora_start(struct sim_loras *l, int i)
{
	struct sim_lora *a = &l->a[i];
	unsigned cost = 0;
	if (a->waiting)
		a->waiting--;
	if (!a->loaded) {
		unsigned loaded = 0;
		int lru = -1;
		for (unsigned k = 0; k < l->n; k++) {
			const struct sim_lora *o = &l->a[k];
			loaded += o->loaded;
			if (o->loaded && !o->running && (lru < 0 || o->used < l->a[lru].used))
				lru = (int)k;
		}
		if (loaded >= l->max && lru >= 0)
			l->a[lru].loaded = 0; /* swapped out */
		a->loaded = 1;
		a->loads++;
		l->loads++;
		cost = l->load_ms;
	}
	a->running++;
	a->used = ++l->tick;
	return cost;
}

void sim_lora_done(struct sim_loras *l, int i)
{
	if (l->a[i].running)
		l->a[i].running--;
	l->a[i].used = ++l->tick;
}

/* The names of the adapters with requests running (or waiting), joined by commas. */
static void list_names(const struct sim_loras *l, int waiting, char *out, size_t cap)
{
	size_t o = 0;
	out[0] = 0;
	for (unsigned i = 0; i < l->n; i++) {
		if (!(waiting ? l->a[i].waiting : l->a[i].running))
			continue;
		int k = snprintf(out + o, cap - o, "%s%s", o ? "," : "", l->a[i].name);
		if (k < 0 || (size_t)k >= cap - o) {
			out[o] = 0; /* a name that does not fit is left out */
			return;
		}
		o += (size_t)k;
	}
}

size_t sim_lora_metrics(struct sim_loras *l, double now_s, char *out, size_t cap)
{
	struct sim_lora_set cur;
	list_names(l, 0, cur.running, sizeof(cur.running));
	list_names(l, 1, cur.waiting, sizeof(cur.waiting));
	struct sim_lora_set *last = l->nhist ? &l->hist[l->nhist - 1] : NULL;
	/* each set is set at a later time than the one before: the latest is the largest */
	cur.at = last && now_s <= last->at ? last->at + 0.001 : now_s;
	if (!last || strcmp(last->running, cur.running) || strcmp(last->waiting, cur.waiting)) {
		for (unsigned i = 0; i < l->nhist; i++) /* a set seen before moves to the end */
			if (!strcmp(l->hist[i].running, cur.running) &&
			    !strcmp(l->hist[i].waiting, cur.waiting)) {
				memmove(&l->hist[i], &l->hist[i + 1],
					(l->nhist - i - 1) * sizeof(l->hist[0]));
				l->nhist--;
				break;
			}
		if (l->nhist == SIM_LORA_HISTORY) {
			memmove(&l->hist[0], &l->hist[1], (l->nhist - 1) * sizeof(l->hist[0]));
			l->nhist--;
		}
		l->hist[l->nhist++] = cur;
	} else
		last->at = cur.at;
	size_t o =
	    (size_t)snprintf(out, cap,
			     "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
			     "# TYPE vllm:lora_requests_info gauge\n");
	for (unsigned i = 0; i < l->nhist && o < cap; i++)
		o += (size_t)snprintf(
		    out + o, cap - o,
		    "vllm:lora_requests_info{max_lora=\"%u\",running_lora_adapters="
		    "\"%s\",waiting_lora_adapters=\"%s\"} %.3f\n",
		    l->max, l->hist[i].running, l->hist[i].waiting, l->hist[i].at);
	return o < cap ? o : (cap ? cap - 1 : 0);
}

size_t sim_lora_stats(const struct sim_loras *l, char *out, size_t cap)
{
	size_t o = (size_t)snprintf(out, cap, ",\"max_loras\":%u,\"lora_loads\":%lu,\"lora\":{",
				    l->max, l->loads);
	for (unsigned i = 0; i < l->n && o < cap; i++) {
		const struct sim_lora *a = &l->a[i];
		o += (size_t)snprintf(out + o, cap - o,
				      "%s\"%s\":{\"requests\":%lu,\"loads\":%lu,\"loaded\":%s,"
				      "\"running\":%u,\"waiting\":%u}",
				      i ? "," : "", a->name, a->requests, a->loads,
				      a->loaded ? "true" : "false", a->running, a->waiting);
	}
	if (o < cap)
		o += (size_t)snprintf(out + o, cap - o, "}");
	return o < cap ? o : (cap ? cap - 1 : 0);
}
