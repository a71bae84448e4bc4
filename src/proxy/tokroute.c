/*
 * tokroute.c - a prompt's token blocks for balance: llm (see tokroute.h). Each worker
 * tokenizes through its own struct tokprompt, made at its first such request and kept (its
 * buffers grow to the largest prompt, never per request; worker_destroy() frees it). Only
 * the start of a long prompt is encoded: the text of the blocks the index reads, and some to
 * spare (a prompt cut so is still keyed on tokens). Each prompt of such a model is counted
 * in the worker's own shard by how it was keyed (accelnet_model_prompts_total: tokens, or
 * why not), which is what runtime/tokhealth.h judges the tokenizer by.
 */
#include "proxy/tokroute.h"
#include "conf/schema_tokmodel.h"
#include "runtime/llm.h"
#include "runtime/proxy_metric.h"
#include "runtime/tokprompt.h"

#include <errno.h>
#include <stdlib.h>

/* The prompt text tokenized, at most: this many bytes for each token of the blocks the index
 * reads (LLM_MAX_BLOCKS of them), so that a client's largest body costs a bounded encode. */
#define TEXT_PER_TOKEN 8

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
	if (!m)
		return -1;
	int cut, rc = -ENOMEM;
	if (w->tokp || (w->tokp = calloc(1, sizeof(*w->tokp))))
		rc = tokprompt_ids(w->tokp, m->tm, body, len, v,
				   (size_t)LLM_MAX_BLOCKS * m->block_size * TEXT_PER_TOKEN, &ids,
				   &nids, &cut);
	if (rc == -ENOENT) /* no prompt: nothing keyed, on tokens or bytes */
		return -1;
	enum tok_keyed how = rc == 0	      ? TOK_KEYED_TOKENS
			     : rc == -ENOTSUP ? TOK_KEYED_TEMPLATE_UNKNOWN
			     : rc == -EINVAL  ? TOK_KEYED_CONTENT_UNSUPPORTED
			     : rc == -EBADMSG ? TOK_KEYED_PROMPT_UNSUPPORTED
					      : TOK_KEYED_ENCODE_FAILED;
	metrics_add(w->shard, PM_TOKMODEL_PROMPTS,
		    (size_t)(m - w->conf->tokmodels) * TOK_KEYEDS + how, 1);
	if (rc < 0)
		return -1;
	rb->llm_block_tokens = (uint16_t)m->block_size;
	size_t n = tokmodel_blocks(ids, nids, m->block_size, tokprompt_seed(body, v),
				   rb->llm_blocks, LLM_MAX_BLOCKS);
	return (long)(cut && n ? n - 1 : n); /* (a cut text's last block may be another's) */
}
