/*
 * promtext.c - the reader behind promtext.h: a line at a time, each line a comment, a blank
 * or a sample; a sample is cut into name, labels (skipped with their quoting, and read as
 * pairs for a family that asks for some), value and what may follow it. Values go through strtod
 * only after their characters were checked, so no hexadecimal float or "nan(...)" that Prometheus
 * would refuse gets in.
 */
#include "obs/promtext.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define VALUE_MAX 64 /* the longest value or timestamp token read */

static int is_space(char c)
{
	return c == ' ' || c == '\t';
}

static int is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static int is_name_char(char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

/* Past the labels that start at <p>[*i] == '{': 0, or -1 when they never close. */
static int skip_labels(const char *p, size_t n, size_t *i)
{
	int quoted = 0;
	for (size_t k = *i + 1; k < n; k++) {
		char c = p[k];
		if (quoted && c == '\\') {
			k++; /* the escaped byte, whatever it is */
			continue;
		}
		if (c == '"')
			quoted = !quoted;
		else if (!quoted && c == '}') {
			*i = k + 1;
			return 0;
		}
	}
	return -1;
}

/* The end (past '}') of the labels that start at p[i] == '{', known to close. */
static size_t end_of_labels(const char *p, size_t n, size_t i)
{
	(void)skip_labels(p, n, &i);
	return i;
}

/* A float as Prometheus writes one: 0 with *out, or -1. */
static int parse_float(const char *p, size_t n, double *out)
{
	char buf[VALUE_MAX];
	if (!n || n >= sizeof(buf) || memchr(p, '\0', n))
		return -1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	const char *word = buf + (buf[0] == '+' || buf[0] == '-');
	if (strcasecmp(word, "nan") == 0 || strcasecmp(word, "inf") == 0 ||
	    strcasecmp(word, "infinity") == 0) {
		*out = strtod(buf, NULL);
		return 0;
	}
	for (size_t k = 0; k < n; k++) {
		char c = buf[k];
		if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' ||
		      c == '-'))
			return -1;
	}
	char *end;
	errno = 0;
	*out = strtod(buf, &end);
	return end == buf + n ? 0 : -1; /* ERANGE: an infinity or 0, still a number */
}

/* The end of the token starting at <i>. */
static size_t token_end(const char *p, size_t n, size_t i)
{
	while (i < n && !is_space(p[i]))
		i++;
	return i;
}

static size_t skip_space(const char *p, size_t n, size_t i)
{
	while (i < n && is_space(p[i]))
		i++;
	return i;
}

/* The labels <w> reads: at most PROMTEXT_LABELS_MAX. */
static unsigned labels_of(const struct promtext_want *w)
{
	return w->nlabels < PROMTEXT_LABELS_MAX ? w->nlabels : PROMTEXT_LABELS_MAX;
}

static size_t label_name_end(const char *p, size_t n, size_t i)
{
	if (i >= n || !(is_name_start(p[i]) && p[i] != ':'))
		return i;
	while (i < n && is_name_char(p[i]) && p[i] != ':')
		i++;
	return i;
}

/*
 * The labels p[s..e) (the braces included, skip_labels() found them) read strictly for <w>:
 * each of its labels' value into out[] (p NULL: absent). 0, or -1 when they are not
 * name="value" pairs.
 */
static int read_labels(const char *p, size_t s, size_t e, const struct promtext_want *w,
		       struct promtext_span *out)
{
	unsigned nl = labels_of(w);
	for (unsigned k = 0; k < nl; k++)
		out[k] = (struct promtext_span){NULL, 0};
	size_t i = skip_space(p, e, s + 1);
	while (i < e - 1) {
		size_t ns = i, ne = label_name_end(p, e, i);
		if (ne == ns)
			return -1;
		i = skip_space(p, e, ne);
		if (i >= e || p[i] != '=')
			return -1;
		i = skip_space(p, e, i + 1);
		if (i >= e || p[i] != '"')
			return -1;
		size_t vs = ++i;
		while (i < e && p[i] != '"')
			i += p[i] == '\\' ? 2 : 1;
		if (i >= e)
			return -1;
		for (unsigned k = 0; k < nl; k++)
			if (strlen(w->labels[k]) == ne - ns &&
			    !memcmp(w->labels[k], p + ns, ne - ns))
				out[k] = (struct promtext_span){p + vs, i - vs};
		i = skip_space(p, e, i + 1);
		if (i < e && p[i] == ',')
			i = skip_space(p, e, i + 1);
		else if (i != e - 1)
			return -1;
	}
	return 0;
}

size_t promtext_unescape(const struct promtext_span *v, char *out, size_t cap)
{
	size_t o = 0;
	if (!cap)
		return 0;
	for (size_t i = 0; v->p && i < v->n && o + 1 < cap; i++) {
		char c = v->p[i];
		if (c == '\\' && i + 1 < v->n) {
			c = v->p[++i];
			if (c == 'n')
				c = '\n';
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return o;
}

/* One line without its end: 1 a sample, 0 a comment or blank, -1 malformed. */
static int read_line(const char *p, size_t n, struct promtext_want *want, size_t nwant)
{
	size_t i = skip_space(p, n, 0);
	if (i == n || p[i] == '#')
		return 0;
	size_t name = i, name_len = 0;
	if (p[i] != '{') { /* else the name is quoted inside the braces: never one of ours */
		if (!is_name_start(p[i]))
			return -1;
		while (i < n && is_name_char(p[i]))
			i++;
		name_len = i - name;
	}
	size_t labels = i;
	if (i < n && p[i] == '{' && skip_labels(p, n, &i) < 0)
		return -1;
	if (i == n || !is_space(p[i]))
		return -1;
	i = skip_space(p, n, i);
	size_t end = token_end(p, n, i);
	double v;
	if (parse_float(p + i, end - i, &v) < 0)
		return -1;
	i = skip_space(p, n, end);
	if (i < n && p[i] != '#') { /* a timestamp */
		double ts;
		end = token_end(p, n, i);
		if (parse_float(p + i, end - i, &ts) < 0)
			return -1;
		i = skip_space(p, n, end);
	}
	if (i < n && p[i] != '#') /* '#': an OpenMetrics exemplar, not read */
		return -1;
	if (!name_len || name_len > PROMTEXT_NAME_MAX)
		return 1;
	for (size_t k = 0; k < nwant; k++) {
		struct promtext_want *w = &want[k];
		struct promtext_span got[PROMTEXT_LABELS_MAX];
		if (strlen(w->name) != name_len || memcmp(w->name, p + name, name_len) != 0)
			continue;
		if (w->nlabels && labels < n && p[labels] == '{' &&
		    read_labels(p, labels, end_of_labels(p, n, labels), w, got) < 0)
			return -1;
		if (!isfinite(v))
			continue;
		if (w->nlabels && (!w->samples || v >= w->top)) {
			w->top = v;
			for (unsigned l = 0; l < labels_of(w); l++)
				w->label[l] = labels < n && p[labels] == '{'
						  ? got[l]
						  : (struct promtext_span){NULL, 0};
		}
		w->sum += v;
		w->samples++;
	}
	return 1;
}

int promtext_read(const char *text, size_t len, struct promtext_want *want, size_t nwant)
{
	int samples = 0;
	for (size_t k = 0; k < nwant; k++) {
		want[k].sum = 0;
		want[k].samples = 0;
		want[k].top = 0;
		memset(want[k].label, 0, sizeof(want[k].label));
	}
	for (size_t pos = 0; pos < len;) {
		const char *line = text + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - line) : len - pos;
		pos += n + (nl != NULL);
		if (n && line[n - 1] == '\r')
			n--;
		int rc = read_line(line, n, want, nwant);
		if (rc < 0)
			return -EBADMSG;
		if (samples < INT32_MAX)
			samples += rc;
	}
	return samples;
}
