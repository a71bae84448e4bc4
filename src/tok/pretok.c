/*
 * pretok.c - the Split steps of the pre-tokenizer (pretok.h). Step k runs its pattern over a
 * piece as Hugging Face's does (find every match left to right, each search from the last
 * match's end, the piece as the whole subject so lookarounds see its edges) and hands each
 * gap and each kept match to step k + 1, the last step to the caller. The offsets are copied
 * out of the match data before going down a step, so one match data serves every step.
 * A pattern that can match the empty string is refused at load: the reference's handling of
 * empty matches is not one accelnet reproduces.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/pretok.h"

#include <errno.h>
#include <pcre2.h>
#include <stdio.h>

const char pretok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

int pretok_add_split(struct pretok *pt, const char *p, size_t n, int literal, int removed,
		     char *err, size_t errlen)
{
	if (pt->n == PRETOK_MAX_STEPS) {
		snprintf(err, errlen, "more than %d pre-tokenizer steps", PRETOK_MAX_STEPS);
		return -EINVAL;
	}
	int code;
	PCRE2_SIZE at;
	uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, n, opts, &code, &at, NULL);
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
	pt->step[pt->n].removed = removed;
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
	size_t prev = 0;
	int r;
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
		if (ms > prev && (r = split_step(pt, k + 1, md, s + prev, ms - prev, fn, arg)))
			return r;
		if (!pt->step[k].removed &&
		    (r = split_step(pt, k + 1, md, s + ms, me - ms, fn, arg)))
			return r;
		prev = me;
	}
	if (prev < n && (r = split_step(pt, k + 1, md, s + prev, n - prev, fn, arg)))
		return r;
	return 0;
}

int pretok_split(const struct pretok *pt, pcre2_match_data *md, const uint8_t *s, size_t n,
		 pretok_fn fn, void *arg)
{
	if (!n)
		return 0;
	return split_step(pt, 0, md, s, n, fn, arg);
}
