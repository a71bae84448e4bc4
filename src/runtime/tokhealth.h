/*
 * tokhealth.h - is a model's tokenizer working? For each model of models: (tok/tokmodel.h)
 * one of three states, which /readyz, /status and /metrics read:
 *
 *   up        its prompts are tokenized (or too few failed to say otherwise)
 *   degraded  the model has no chat format (its template is one accelnet does not know, or
 *             it has none): its chat requests are keyed on text, its completions on tokens;
 *             fixed at load, never a reason to be unready
 *   failing   most of its recent prompts could not be encoded (tok_encode() failed: the
 *             pre-tokenizer's regex gave up, libsentencepiece refused the text, out of
 *             memory), nor can a plain text: routing on it has silently become routing on
 *             bytes
 *
 * Failing is judged on a window of the last TOKHEALTH_WINDOW ticks (a tick a second: the
 * last 10 s) over the prompts the tokenizer was asked to encode (keyed on tokens, or
 * encode_failed; a prompt keyed on text for its shape or its template is not the
 * tokenizer's fault and is not counted): a model turns failing when at least
 * TOKHEALTH_MIN_TRIED of them were tried in the window and more than half failed, and up
 * again once at most a quarter of those in the window failed, or fewer than
 * TOKHEALTH_MIN_TRIED were tried (a window with too few prompts says nothing: a proxy taken
 * out of rotation gets none, and must come back to be tried). One odd prompt never turns
 * it, and the gap between a half and a quarter keeps it from flapping at the edge.
 *
 * But a window of failed prompts alone is no proof against the tokenizer: the texts are the
 * clients', and a text the tokenizer gives up on fails alike in every replica with that
 * file, so that a client sending mostly such texts would turn every replica unready
 * together (a denial of service through the load balancer). So a model turns (and stays)
 * failing only when its tokenizer also fails on a plain text no client chose
 * (TOKHEALTH_PLAIN), tried on the tick when the window says most failed; one that encodes
 * it is up, its failures the texts' (counted, keyed on bytes, in the window: texts_failing).
 *
 * The counts are the registry's per-worker counters (accelnet_model_prompts_total), summed by
 * the one thread that ticks (control/tokwatch.c); the request path writes nothing here. The
 * state is an atomic the ticking thread stores and any thread (a probe on a worker, the admin
 * endpoint) loads.
 */
#ifndef ACCELNET_RUNTIME_TOKHEALTH_H
#define ACCELNET_RUNTIME_TOKHEALTH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TOKHEALTH_WINDOW 10    /* ticks in the window */
#define TOKHEALTH_TICK_MS 1000 /* ... of this long */
#define TOKHEALTH_MIN_TRIED 10 /* prompts tried in the window before it may judge failing */

/* The plain text a tokenizer must fail on too to be failing: prose, digits, punctuation,
 * a line break and some non-ASCII letters, 120 bytes without a run longer than a word. */
#define TOKHEALTH_PLAIN                                                                            \
	"The quick brown fox jumps over the lazy dog; 0123456789, \"quotes\" (and more).\n"        \
	"Caf\xc3\xa9, na\xc3\xafve: \xe4\xbd\xa0\xe5\xa5\xbd \xd0\xbc\xd0\xb8\xd1\x80."

enum tokhealth_state { TOKHEALTH_UP, TOKHEALTH_DEGRADED, TOKHEALTH_FAILING };

struct tokhealth {
	/* the ticking thread's: the cumulative counts at each of the last ticks, a ring */
	uint64_t tried[TOKHEALTH_WINDOW + 1], failed[TOKHEALTH_WINDOW + 1];
	unsigned at, ticks;
	int failing;
	int texts_failing; /* the window says most failed, but the tokenizer encodes TOKHEALTH_PLAIN
			    */
	/* what any thread reads: enum tokhealth_state, and the window's counts behind it */
	atomic_int state;
	_Atomic uint64_t win_tried, win_failed;
	int degraded; /* fixed at load: no chat format */
};

/* A model's state before its first tick: degraded when it has no chat format, else up. */
void tokhealth_init(struct tokhealth *h, int degraded);

/* Does the tokenizer encode TOKHEALTH_PLAIN? 1 yes, 0 no (tokhealth_tick()'s question). */
typedef int (*tokhealth_plain_fn)(void *arg);

/*
 * One tick: <tried> prompts the tokenizer was asked to encode since the start, <failed> of
 * them in vain (cumulative counts, never smaller than the last tick's). Updates the window
 * and the state; answers the state. <plain>(<arg>) is asked only when the window says most
 * failed (see above).
 */
enum tokhealth_state tokhealth_tick(struct tokhealth *h, uint64_t tried, uint64_t failed,
				    tokhealth_plain_fn plain, void *arg);

static inline enum tokhealth_state tokhealth_state(const struct tokhealth *h)
{
	return (enum tokhealth_state)atomic_load_explicit(&h->state, memory_order_relaxed);
}

/* "up", "degraded", "failing". */
const char *tokhealth_state_name(enum tokhealth_state s);

#endif
