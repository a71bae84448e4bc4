/*
 * glob.c - '*' and '?' patterns (see glob.h).
 *
 * The classic greedy walk with one backtrack point: on a mismatch after a '*', the star
 * takes one byte more and the rest of the pattern is tried again from there. Only the last
 * star needs remembering (a later star can absorb whatever an earlier one would have), so
 * the cost is at most the length of the name times the length of the pattern.
 */
#include "core/glob.h"

int glob_match(const char *pat, const char *s, size_t n)
{
	const char *star = NULL;  /* the pattern just after the last '*' seen */
	size_t i = 0, resume = 0; /* the name position that star's retry starts from */
	while (i < n) {
		if (*pat == '*') {
			star = ++pat;
			resume = i;
		} else if (*pat && (*pat == '?' || *pat == s[i])) {
			pat++;
			i++;
		} else if (star) {
			pat = star;
			i = ++resume;
		} else {
			return 0;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}
