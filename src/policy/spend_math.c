/*
 * spend_math.c - prices, costs, windows and the spend word (see spend_math.h).
 */
#include "policy/spend_math.h"

#include <errno.h>

int spend_parse_amount(const char *s, uint64_t *out)
{
	uint64_t whole = 0, frac = 0;
	unsigned nwhole = 0, nfrac = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++, nwhole++) {
		if (whole > SPEND_AMOUNT_MAX)
			return -ERANGE; /* before it can overflow: 19 digits fit */
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++, nfrac++) {
			if (nfrac == 6)
				return -EINVAL; /* finer than a micro-unit */
			frac = frac * 10 + (uint64_t)(*p - '0');
		}
		if (!nfrac)
			return -EINVAL; /* "1." */
	}
	if (*p || !nwhole)
		return -EINVAL; /* ".5", "-1", "1e3", " 1" and "" alike */
	if (whole > SPEND_AMOUNT_MAX)
		return -ERANGE;
	for (; nfrac < 6; nfrac++)
		frac *= 10;
	uint64_t v = whole * SPEND_MICROS + frac;
	if (v > SPEND_AMOUNT_MAX * SPEND_MICROS)
		return -ERANGE;
	*out = v;
	return 0;
}

int spend_parse_window(const char *s, uint64_t *out)
{
	uint64_t n = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > SPEND_WINDOW_MAX_S)
			return -ERANGE;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	if (p == s || !*p || p[1])
		return -EINVAL;
	uint64_t unit = *p == 's' ? 1 : *p == 'm' ? 60 : *p == 'h' ? 3600 : *p == 'd' ? 86400 : 0;
	if (!unit)
		return -EINVAL;
	if (!n)
		return -ERANGE;
	if (n > SPEND_WINDOW_MAX_S / unit)
		return -ERANGE;
	*out = n * unit;
	return 0;
}

/* a * b + c, saturating at UINT64_MAX */
static uint64_t mul_add(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t m, r;
	if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, &r))
		return UINT64_MAX;
	return r;
}

uint64_t spend_cost(const struct spend_price *p, uint64_t prompt, uint64_t cached,
		    uint64_t completion)
{
	if (cached > prompt)
		cached = prompt;
	/* in millionths of a micro-unit: tokens times micro-units per million tokens */
	uint64_t fine = mul_add(prompt - cached, p->input, 0);
	fine = mul_add(cached, p->cached_input, fine);
	fine = mul_add(completion, p->output, fine);
	if (fine == UINT64_MAX)
		return SPEND_SPENT_MAX;
	uint64_t cost = fine / SPEND_MICROS + (fine % SPEND_MICROS != 0);
	return cost < SPEND_SPENT_MAX ? cost : SPEND_SPENT_MAX;
}

uint64_t spend_window_of(uint64_t now_s, uint64_t window_s)
{
	return now_s / window_s;
}

uint64_t spend_window_left(uint64_t now_s, uint64_t window_s)
{
	return window_s - now_s % window_s;
}

#define TAG_MASK ((1ull << SPEND_TAG_BITS) - 1)
#define WORD_TAG(w) ((w) >> SPEND_SPENT_BITS)
#define WORD_SPENT(w) ((w)&SPEND_SPENT_MAX)

static uint64_t word_of(uint64_t win, uint64_t spent)
{
	return (win & TAG_MASK) << SPEND_SPENT_BITS | spent;
}

uint64_t spend_word_at(uint64_t win, uint64_t spent)
{
	return word_of(win, spent < SPEND_SPENT_MAX ? spent : SPEND_SPENT_MAX);
}

uint64_t spend_word_spent(uint64_t word, uint64_t win)
{
	return WORD_TAG(word) == (win & TAG_MASK) ? WORD_SPENT(word) : 0;
}

int spend_word_reserve(uint64_t word, uint64_t win, uint64_t cost, uint64_t budget, uint64_t *next)
{
	uint64_t spent = spend_word_spent(word, win);
	if (budget > SPEND_SPENT_MAX)
		budget = SPEND_SPENT_MAX;
	if (cost > budget || spent > budget - cost)
		return 0;
	*next = word_of(win, spent + cost);
	return 1;
}

uint64_t spend_word_settle(uint64_t word, uint64_t win, uint64_t reserved, uint64_t actual)
{
	if (WORD_TAG(word) != (win & TAG_MASK))
		return word;
	uint64_t spent = WORD_SPENT(word);
	spent = spent > reserved ? spent - reserved : 0;
	if (actual > SPEND_SPENT_MAX - spent)
		spent = SPEND_SPENT_MAX;
	else
		spent += actual;
	return word_of(win, spent);
}
