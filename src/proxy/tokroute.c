/*
 * tokroute.c - a prompt's token blocks for balance: llm (see tokroute.h). Each worker
 * tokenizes through its own struct tokprompt, made at its first such request and kept (its
 * buffers grow to the largest prompt, never per request; worker_destroy() frees it).
 */
#include "proxy/tokroute.h"
#include "conf/schema_tokmodel.h"
#include "runtime/llm.h"
#include "runtime/tokprompt.h"

#include <stdlib.h>

long tokroute_blocks(struct worker *w, struct reqbody *rb, const char *body, size_t len)
{
	const struct json_view *v = &rb->view;
	char model[CONF_MODEL_MAX + 1];
	size_t mlen, nids;
	const uint32_t *ids;
	rb->llm_block_tokens = 0;
	if (!w->conf->ntokmodels || !rb->view_ok ||
	    json_view_model(v, body, model, sizeof(model), &mlen) < 0)
		return -1;
	const struct conf_tokmodel *m = conf_tokmodel_find(w->conf, model, mlen);
	if (!m || (!w->tokp && !(w->tokp = calloc(1, sizeof(*w->tokp)))))
		return -1;
	if (tokprompt_ids(w->tokp, m->tm, body, len, v, &ids, &nids) < 0)
		return -1;
	rb->llm_block_tokens = (uint16_t)m->block_size;
	return (long)tokmodel_blocks(ids, nids, m->block_size, tokprompt_seed(body, v),
				     rb->llm_blocks, LLM_MAX_BLOCKS);
}
