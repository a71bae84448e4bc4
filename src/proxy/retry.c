/*
 * retry.c - the backend's record of a failed attempt, and the retry decision (see retry.h).
 */
#include "proxy/retry.h"
#include "core/clock.h"
#include "core/log.h"
#include "runtime/pick.h"

static const char *failure_text(enum up_failure why)
{
	switch (why) {
	case UP_TIMEOUT:
		return "no response within first_byte_ms";
	case UP_BAD:
		return "malformed response";
	case UP_INTERIM:
		return "too many interim (1xx) responses";
	default:
		return "connection closed before the response";
	}
}

/* What the client is told when no retry saves the request. */
static void failure_answer(enum up_failure why, int *status, const char **detail)
{
	*status = 502;
	switch (why) {
	case UP_CONNECT_TIMEOUT:
		*status = 504;
		*detail = "backend connect timeout";
		break;
	case UP_TIMEOUT:
		*status = 504;
		*detail = "backend did not answer in time";
		break;
	case UP_BAD:
		*detail = "backend sent a malformed response";
		break;
	case UP_INTERIM:
		*detail = "backend sent too many interim responses";
		break;
	case UP_CONNECT:
		*detail = "backend connection failed";
		break;
	case UP_TLS:
		*detail = "backend TLS handshake failed";
		break;
	default:
		*detail = "backend closed the connection";
		break;
	}
}

enum retry_action retry_decide(struct exchange *x, enum up_failure why, int *status,
			       const char **detail)
{
	uint64_t now = loop_now(x->w->loop);
	struct attempt *a = x->att;
	struct backend *be = a->be;
	int connect_failed = retry_connect_failed(why);

	if (connect_failed && be) {
		backend_mark_failed(be, now);
		if (why == UP_TLS)
			log_warn("backend %s: TLS handshake failed: %s; out of rotation for %u ms",
				 be->name, a->up && a->up->tls_error ? a->up->tls_error : "?",
				 be->pool->fail_timeout_ms);
		else
			log_warn("backend %s: connect failed%s; out of rotation for %u ms",
				 be->name, why == UP_CONNECT_TIMEOUT ? " (timeout)" : "",
				 be->pool->fail_timeout_ms);
	}
	if (x->hedge && !x->resp_head)
		return RETRY_TO_HEDGE;
	/* a kept-alive connection the backend had closed is not the backend failing: that
	 * retry is free; one after a failed connect spends the pool's retry budget */
	int stale = why == UP_RESET && a->up_reused && http_method_idempotent(x->meth);
	if (!a->retried && !x->resp_head && x->req.sent == 0 &&
	    (stale || (connect_failed && pool_retry_allowed(x->pool)))) {
		a->retry_status = why == UP_CONNECT_TIMEOUT ? 504 : 502;
		a->retry_tls = why == UP_TLS;
		return RETRY_AGAIN;
	}
	if (be && !connect_failed)
		log_warn("backend %s: %s", be->name, failure_text(why));
	if (be && why == UP_TIMEOUT && !x->resp_head) /* a gateway timeout: latency and a failure */
		backend_observe(x->pool, be, now, (clock_now_ns() - a->sent_ns) / 1000, 504);
	failure_answer(why, status, detail);
	return RETRY_NO;
}
