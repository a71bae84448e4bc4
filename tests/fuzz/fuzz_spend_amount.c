/*
 * fuzz_spend_amount.c - libFuzzer target: the amount and window readers of prices: and
 * routes.budget (policy/spend_math.h) on any bytes. An amount accepted is at most
 * SPEND_AMOUNT_MAX and reads back the same from the decimal it writes; a window accepted is 1 s
 * to SPEND_WINDOW_MAX_S; a cost at any prices never passes SPEND_SPENT_MAX.
 */
#include "policy/spend_math.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char s[64];
	if (size >= sizeof(s))
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	uint64_t v = 0, w = 0;
	if (spend_parse_amount(s, &v) == 0) {
		char back[48];
		uint64_t again = 0;
		if (v > SPEND_AMOUNT_MAX * SPEND_MICROS)
			abort();
		snprintf(back, sizeof(back), "%llu.%06llu", (unsigned long long)(v / SPEND_MICROS),
			 (unsigned long long)(v % SPEND_MICROS));
		if (spend_parse_amount(back, &again) != 0 || again != v)
			abort();
		struct spend_price p = {.input = v, .cached_input = v / 2, .output = v};
		if (spend_cost(&p, v, v / 3, v) > SPEND_SPENT_MAX)
			abort();
	}
	if (spend_parse_window(s, &w) == 0 && (!w || w > SPEND_WINDOW_MAX_S))
		abort();
	return 0;
}
