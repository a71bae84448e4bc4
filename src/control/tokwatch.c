/*
 * tokwatch.c - the tokenizers' tick (see tokwatch.h).
 */
#include "control/tokwatch.h"
#include "core/container.h"
#include "core/log.h"
#include "runtime/proxy_metric.h"
#include "runtime/tokhealth.h"
#include "tok/tokmodel.h"

#include <errno.h>
#include <stdlib.h>

struct tokwatch {
	struct loop *loop;
	struct runtime *rt;
	struct loop_timer timer;
};

/* tokhealth_plain_fn: does the model's tokenizer encode TOKHEALTH_PLAIN? On this thread's
 * own scratch, made for the question (asked only while most of a model's prompts fail). */
static int encodes_plain(void *arg)
{
	const struct tokmodel *m = arg;
	struct tok_scratch s;
	const uint32_t *ids;
	size_t n;
	int rc = tok_scratch_init(&s, &m->tok);
	if (rc == 0)
		rc = tok_encode(&s, TOKHEALTH_PLAIN, sizeof(TOKHEALTH_PLAIN) - 1, 1, &ids, &n);
	tok_scratch_free(&s);
	return rc == 0;
}

static void tokwatch_on_timer(struct loop_timer *lt)
{
	struct tokwatch *t = container_of(lt, struct tokwatch, timer);
	const struct conf *c = t->rt->conf;
	for (size_t i = 0; i < c->ntokmodels; i++) {
		size_t base = i * TOK_KEYEDS;
		uint64_t ok =
		    metrics_count(t->rt->metrics, PM_TOKMODEL_PROMPTS, base + TOK_KEYED_TOKENS);
		uint64_t failed = metrics_count(t->rt->metrics, PM_TOKMODEL_PROMPTS,
						base + TOK_KEYED_ENCODE_FAILED);
		struct tokhealth *h = &t->rt->tokhealth[i];
		int was = h->failing, texts_were = h->texts_failing;
		tokhealth_tick(h, ok + failed, failed, encodes_plain, c->tokmodels[i].tm);
		if (h->texts_failing && !texts_were)
			log_warn("models: %s: %llu of %llu prompts in the last %u s could not be "
				 "encoded, but its tokenizer encodes a plain text: the texts' "
				 "failures, keyed on bytes (GET /readyz stays 200)",
				 c->tokmodels[i].name,
				 (unsigned long long)atomic_load(&h->win_failed),
				 (unsigned long long)atomic_load(&h->win_tried),
				 TOKHEALTH_WINDOW * TOKHEALTH_TICK_MS / 1000);
		if (h->failing != was)
			log_warn(
			    was ? "models: %s: its tokenizer works again (%llu of %llu prompts "
				  "in the last %u s failed): GET /readyz follows"
				: "models: %s: its tokenizer is failing (%llu of %llu prompts "
				  "in the last %u s could not be encoded; keyed on bytes): GET "
				  "/readyz answers 503",
			    c->tokmodels[i].name, (unsigned long long)atomic_load(&h->win_failed),
			    (unsigned long long)atomic_load(&h->win_tried),
			    TOKHEALTH_WINDOW * TOKHEALTH_TICK_MS / 1000);
	}
	loop_timer_set(t->loop, &t->timer, loop_now(t->loop) + TOKHEALTH_TICK_MS);
}

int tokwatch_start(struct loop *loop, struct runtime *rt, struct tokwatch **out)
{
	struct tokwatch *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->loop = loop;
	t->rt = rt;
	t->timer.fn = tokwatch_on_timer;
	if (rt->conf->ntokmodels)
		loop_timer_set(loop, &t->timer, loop_now(loop) + TOKHEALTH_TICK_MS);
	*out = t;
	return 0;
}

void tokwatch_stop(struct tokwatch *t)
{
	if (!t)
		return;
	loop_timer_stop(t->loop, &t->timer);
	free(t);
}
