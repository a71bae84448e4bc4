/*
 * reqbody.c - the strict view of a request body, read once, and the "model" it names (see
 * reqbody.h).
 */
#include "proxy/reqbody.h"
#include "policy/models.h"
#include "runtime/llm.h"

#include <errno.h>

int reqbody_read_view(struct reqbody *rb, const char *body, size_t len)
{
	if (!rb->view_read) {
		rb->view_read = 1;
		rb->view_ok = json_view_read(&rb->view, body, len, &rb->view_why) == 0;
	}
	return rb->view_ok ? 0 : -EINVAL;
}

int reqbody_note_model(struct reqbody *rb, const char *body, struct waiter *wt)
{
	size_t n = 0;
	int r = rb->view_ok && body
		    ? json_view_model(&rb->view, body, rb->model, sizeof(rb->model), &n)
		    : -1;
	rb->model_read = 1;
	wt->has_model = r == 1;
	rb->model_len = r == 1 ? (uint16_t)n : 0;
	wt->model = r == 1 ? models_hash(rb->model, n) : 0;
	if (r != 1)
		rb->model[0] = '\0';
	return r != 1 && rb->view_ok && rb->view.model.e ? -EINVAL : 0;
}

void reqbody_end(struct reqbody *rb, struct worker *w)
{
	llm_blocks_put(&w->llm_spares, rb->llm_blocks);
	rb->llm_blocks = NULL;
}
