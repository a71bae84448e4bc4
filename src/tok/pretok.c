/*
 * pretok.c - the Split steps of the pre-tokenizer (pretok.h). Step k runs its pattern over a
 * piece as Hugging Face's does (find every match left to right, each search from the last
 * match's end, the piece as the whole subject so lookarounds see its edges) and hands each
 * gap and each kept match to step k + 1, the last step to the caller. The offsets are copied
 * out of the match data before going down a step, so one match data serves every step.
 * A pattern that can match the empty string is refused at load: the reference's handling of
 * empty matches is not one accelnet reproduces.
 *
 * The reference's regex engine knows a newer Unicode than Debian's libpcre2 (14.0): to it a
 * CJK extension H or I ideograph is a letter, to PCRE2 unassigned, and the two would cut
 * such text differently. So each \p{L}, \p{N}, \p{M}, \p{P} and \p{S} of a pattern (and
 * \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo}: Mistral-Nemo's) is widened, as written, by the code
 * points uninew.c lists for it (in a class, the ranges are added to it; outside one, the property
 * becomes a class of both). \P{...} is refused: its complement cannot be widened that way. \s is
 * written out as Unicode's White_Space, which the reference uses: PCRE2's \s also takes U+180E
 * (MONGOLIAN VOWEL SEPARATOR, white space until Unicode 6.3), and so split "\u180e<div" where the
 * reference does not. The escapes whose meaning differs between the two engines in other ways (\w,
 * \d, \b, \h, \v, \R...) are refused.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/pretok.h"

#include "tok/uninew.h"

#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char pretok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* The new code points of class name[0..n) (L, N, M, P, S, Lu, Ll, Lt, Lm, Lo), or NULL. */
static const char *uninew_of(const char *name, size_t n)
{
	static const struct {
		const char *name, *add;
	} cls[] = {{"L", uninew_L},   {"N", uninew_N},	 {"M", uninew_M},   {"P", uninew_P},
		   {"S", uninew_S},   {"Lu", uninew_Lu}, {"Ll", uninew_Ll}, {"Lt", uninew_Lt},
		   {"Lm", uninew_Lm}, {"Lo", uninew_Lo}};
	for (size_t i = 0; i < sizeof(cls) / sizeof(cls[0]); i++)
		if (strlen(cls[i].name) == n && !memcmp(cls[i].name, name, n))
			return cls[i].add;
	return NULL;
}

/* Unicode's White_Space, the reference's \s: PCRE2's also holds U+180E (its \h does). */
static const char white_space[] = "\\t\\n\\x0B\\f\\r\\x20\\x85\\xA0\\x{1680}\\x{2000}-\\x{200A}"
				  "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* Pattern p[0..n) with its \p{X} widened and its \s, \S made Unicode's (above), in a new
 * string (*out, freed by the caller, *outn its length); 0, -ENOMEM, or -EINVAL (*bad says
 * what) for what the two engines read differently or this rewriting cannot follow: \P, a
 * \p other than \p{L}, \p{N}, \p{M}, \p{P}, \p{S}, \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo}
 * (\pL, \p{Nd}, \p{Han}: PCRE2's older data),
 * \S in a class, \w, \W, \d, \D, \b, \B, \h, \H, \v, \V, \R, \X, \Q, a POSIX class. */
static int widen(const char *p, size_t n, char **out, size_t *outn, const char **bad)
{
	size_t extra = 0;
	for (size_t i = 0; i + 1 < n; i++)
		if (p[i] == '\\')
			extra += 5 + strlen(uninew_L) + sizeof(white_space), i++; /* the longest */
	char *o = malloc(n + extra + 1), *w = o;
	if (!o)
		return -ENOMEM;
	int in_class = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\\' && i + 1 < n) {
			/* \p{X} or \p{Xy}: nl letters */
			size_t nl = i + 4 < n && p[i + 4] == '}'		      ? 1
				    : i + 5 < n && p[i + 4] != '}' && p[i + 5] == '}' ? 2
										      : 0;
			const char *add = nl && p[i + 1] == 'p' && p[i + 2] == '{'
					      ? uninew_of(p + i + 3, nl)
					      : NULL;
			static const char *const what[] = {"\\P", "\\w", "\\W", "\\d", "\\D",
							   "\\b", "\\B", "\\h", "\\H", "\\v",
							   "\\V", "\\R", "\\X", "\\Q"};
			static const char letters[] = "PwWdDbBhHvVRXQ";
			const char *k = strchr(letters, p[i + 1]);
			*bad = k && p[i + 1]		     ? what[k - letters]
			       : p[i + 1] == 'S' && in_class ? "\\S in a class"
			       : p[i + 1] == 'p' && !add
				   ? "a \\p other than \\p{L}, \\p{N}, \\p{M}, "
				     "\\p{P}, \\p{S}, \\p{Lu}, \\p{Ll}, \\p{Lt}, \\p{Lm} and "
				     "\\p{Lo}"
				   : NULL;
			if (*bad) {
				free(o);
				return -EINVAL;
			}
			if (p[i + 1] == 's' || p[i + 1] == 'S') {
				w += sprintf(w, "%s%s%s",
					     in_class	       ? ""
					     : p[i + 1] == 's' ? "["
							       : "[^",
					     white_space, in_class ? "" : "]");
				i++;
				continue;
			}
			if (add) {
				if (!in_class)
					*w++ = '[';
				memcpy(w, p + i, 4 + nl);
				w += 4 + nl;
				memcpy(w, add, strlen(add));
				w += strlen(add);
				if (!in_class)
					*w++ = ']';
				i += 3 + nl;
				continue;
			}
			*w++ = p[i++];
			*w++ = p[i];
			continue;
		}
		if (p[i] == '[' && !in_class) {
			in_class = 1;
			*w++ = p[i];
			if (i + 1 < n && p[i + 1] == '^')
				*w++ = p[++i];
			if (i + 1 < n && p[i + 1] == ']') /* a ']' first is a literal one */
				*w++ = p[++i];
			continue;
		}
		if (p[i] == '[' && in_class && i + 1 < n && strchr(":.=", p[i + 1])) {
			*bad = "a POSIX class";
			free(o);
			return -EINVAL;
		}
		if (p[i] == ']' && in_class)
			in_class = 0;
		*w++ = p[i];
	}
	*out = o;
	*outn = (size_t)(w - o);
	return 0;
}

int pretok_add_split(struct pretok *pt, const char *p, size_t n, int literal, int behavior,
		     char *err, size_t errlen)
{
	if (pt->n == PRETOK_MAX_STEPS) {
		snprintf(err, errlen, "more than %d pre-tokenizer steps", PRETOK_MAX_STEPS);
		return -EINVAL;
	}
	int code;
	PCRE2_SIZE at;
	uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
	char *wide = NULL;
	size_t nwide = n;
	if (!literal) {
		const char *bad = NULL;
		int r = widen(p, n, &wide, &nwide, &bad);
		if (r == -EINVAL)
			snprintf(err, errlen,
				 "pattern \"%.*s\": %s is not supported (PCRE2 and the "
				 "reference's Oniguruma read it differently)",
				 (int)(n > 200 ? 200 : n), p, bad);
		if (r)
			return r;
	}
	pcre2_code *re =
	    pcre2_compile((PCRE2_SPTR)(wide ? wide : p), nwide, opts, &code, &at, NULL);
	free(wide);
	if (!re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(code, msg, sizeof(msg));
		snprintf(err, errlen, "pattern \"%.*s\": %s at offset %zu",
			 (int)(n > 200 ? 200 : n), p, (char *)msg, (size_t)at);
		return -EINVAL;
	}
	uint32_t minlen = 0;
	pcre2_pattern_info(re, PCRE2_INFO_MINLENGTH, &minlen);
	if (minlen == 0) {
		pcre2_code_free(re);
		snprintf(err, errlen, "pattern \"%.*s\" can match the empty string",
			 (int)(n > 200 ? 200 : n), p);
		return -EINVAL;
	}
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter where JIT is missing */
	pt->step[pt->n].re = re;
	pt->step[pt->n].behavior = behavior;
	pt->n++;
	return 0;
}

void pretok_free(struct pretok *pt)
{
	for (size_t i = 0; i < pt->n; i++)
		pcre2_code_free(pt->step[i].re);
	pt->n = 0;
}

pcre2_match_data *pretok_match_data_new(void)
{
	return pcre2_match_data_create(16, NULL);
}

void pretok_match_data_free(pcre2_match_data *md)
{
	pcre2_match_data_free(md);
}

static int split_step(const struct pretok *pt, size_t k, pcre2_match_data *md, const uint8_t *s,
		      size_t n, pretok_fn fn, void *arg)
{
	if (k == pt->n)
		return fn(arg, s, n);
	size_t prev = 0, pend = SIZE_MAX; /* MergedWithNext: a match waiting for text after it */
	int beh = pt->step[k].behavior, r;
#define DOWN(a, b) ((r = split_step(pt, k + 1, md, s + (a), (b) - (a), fn, arg)))
	while (prev < n) {
		int rc = pcre2_match(pt->step[k].re, s, n, prev, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return -EOVERFLOW;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		size_t ms = ov[0], me = ov[1];
		if (me <= ms || ms < prev)
			return -EOVERFLOW; /* refused at load: cannot match empty */
		if (beh == PRETOK_MERGED_WITH_PREVIOUS) {
			if (DOWN(ms > prev ? prev : ms, me)) /* the text before, and the match */
				return r;
		} else if (beh == PRETOK_MERGED_WITH_NEXT) {
			if (ms > prev && DOWN(pend != SIZE_MAX ? pend : prev, ms))
				return r;
			if (ms == prev && pend != SIZE_MAX && DOWN(pend, ms)) /* a match alone */
				return r;
			pend = ms;
		} else {
			if (ms > prev && DOWN(prev, ms))
				return r;
			if (beh == PRETOK_ISOLATED && DOWN(ms, me))
				return r;
		}
		prev = me;
	}
	if (prev < n && DOWN(pend != SIZE_MAX ? pend : prev, n))
		return r;
	if (prev == n && pend != SIZE_MAX && DOWN(pend, n))
		return r;
#undef DOWN
	return 0;
}

int pretok_split(const struct pretok *pt, pcre2_match_data *md, const uint8_t *s, size_t n,
		 pretok_fn fn, void *arg)
{
	if (!n)
		return 0;
	return split_step(pt, 0, md, s, n, fn, arg);
}
