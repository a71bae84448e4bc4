/*
 * spend_math.h - the arithmetic of spend budgets, pure functions: a price or an amount read
 * from its decimal text, what a request costs at a model's prices, which window a moment
 * falls in, and a tenant's spend in one word that a reservation changes with one
 * compare-and-swap.
 *
 * Money is integer micro-units (millionths of whatever currency the prices are written in,
 * $0.000001 for dollars), never floating point: a price per million tokens in micro-units is
 * exactly the price of one token in millionths of a micro-unit, so a cost is the sum of
 * tokens times prices, divided by a million once and rounded up (a request never costs less
 * than its tokens do). Every step saturates instead of wrapping: a backend may report any
 * 19 digits of tokens.
 *
 * A tenant's spend in the current window is kept in one 64-bit word: the window's number
 * (its low SPEND_TAG_BITS bits) beside the micro-units spent in it (SPEND_SPENT_BITS bits,
 * so at most SPEND_SPENT_MAX; budgets are capped below it). A word whose tag is not the
 * current window's holds nothing spent: the window turned, and the first reservation of the
 * new one starts it afresh in the same compare-and-swap, so no reset races a reservation.
 * The tag wraps after 2^24 windows (194 days of 1 s windows, centuries of days): a word left
 * untouched exactly that long reads as spent, which only refuses early, never lets through.
 */
#ifndef ACCELNET_POLICY_SPEND_MATH_H
#define ACCELNET_POLICY_SPEND_MATH_H

#include <stddef.h>
#include <stdint.h>

#define SPEND_MICROS 1000000ull /* micro-units in one unit of currency */
#define SPEND_SPENT_BITS 40
#define SPEND_TAG_BITS 24
#define SPEND_SPENT_MAX ((1ull << SPEND_SPENT_BITS) - 1)
#define SPEND_AMOUNT_MAX 1000000ull	     /* the largest budget or price, in currency units */
#define SPEND_WINDOW_MAX_S (3660ull * 86400) /* ten years */

/* A model's prices: micro-units per million tokens. */
struct spend_price {
	uint64_t input;	       /* prompt tokens the engine did not have cached */
	uint64_t cached_input; /* prompt tokens it served from its cache */
	uint64_t output;       /* completion tokens */
};

/*
 * The decimal <s> ("0.15", "12", "1.000001"; digits, at most one '.', at most six digits
 * after it; no sign, exponent or space) in micro-units into *out: 0, or -EINVAL (not such a
 * number) or -ERANGE (more than SPEND_AMOUNT_MAX).
 */
int spend_parse_amount(const char *s, uint64_t *out);

/*
 * A window's length <s>: a whole number and a unit, s, m, h or d ("90s", "1h", "7d", "30d"),
 * 1 s to SPEND_WINDOW_MAX_S, into *out seconds: 0, -EINVAL or -ERANGE.
 */
int spend_parse_window(const char *s, uint64_t *out);

/*
 * What <prompt> tokens, <cached> of them served from the engine's cache (at most <prompt>:
 * more counts as <prompt>), and <completion> tokens cost at <p>: micro-units, rounded up,
 * saturating at SPEND_SPENT_MAX.
 */
uint64_t spend_cost(const struct spend_price *p, uint64_t prompt, uint64_t cached,
		    uint64_t completion);

/* The number of the window of <window_s> seconds that the Unix time <now_s> falls in
 * (windows start at multiples of their length since 1970-01-01 00:00 UTC), and the
 * seconds until the next starts. */
uint64_t spend_window_of(uint64_t now_s, uint64_t window_s);
uint64_t spend_window_left(uint64_t now_s, uint64_t window_s);

/* The word of <spent> micro-units (at most SPEND_SPENT_MAX) in window <win>. */
uint64_t spend_word_at(uint64_t win, uint64_t spent);

/* The micro-units a word shows spent in window <win>: 0 when the word is of another. */
uint64_t spend_word_spent(uint64_t word, uint64_t win);

/*
 * Reserve <cost> in <word> for window <win> within <budget>: 1 with *next the word to swap
 * in, or 0 when spent plus cost would pass the budget (*next untouched).
 */
int spend_word_reserve(uint64_t word, uint64_t win, uint64_t cost, uint64_t budget, uint64_t *next);

/*
 * Settle a reservation of <reserved> made in window <win> at <actual>: the word to swap in
 * for <word> (never below 0, never past SPEND_SPENT_MAX); <word> itself when the window has
 * turned since (what was reserved stayed in the old window, which has gone).
 */
uint64_t spend_word_settle(uint64_t word, uint64_t win, uint64_t reserved, uint64_t actual);

#endif
