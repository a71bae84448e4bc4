/*
 * parse.c - the strict HTTP/1.1 head parser.
 *
 * The parser walks the head once, line by line. A line ends only at CRLF; a CR not followed
 * by LF, or an LF not preceded by CR, is an error. The start line is split by single spaces;
 * each field line is checked byte by byte against the RFC 9110 grammar (token name, colon
 * with nothing before it, value of VCHAR/obs-text/SP/HTAB). After the fields, the framing
 * rules of RFC 9112 section 6 decide how the body is delimited, refusing every ambiguity.
 *
 * A field line that is well formed (a token, a colon, a value, CRLF, inside max_head) is read
 * in one pass over its bytes, each classed by one table lookup; anything else on the line
 * (a bad byte, a bare CR or LF, the end of the buffer, max_head) sends that line through the
 * careful path, which finds its end first and so decides between "need more", 431 and the
 * error status exactly as it would have for every line.
 */
#include "http/parse.h"

#include <string.h>
#include <strings.h>

enum { C_TCHAR = 1, C_VALUE = 2 };

/* The class of each byte: C_TCHAR for a tchar (RFC 9110 token), C_VALUE for a byte allowed in
 * a field value (VCHAR, obs-text, SP, HTAB). */
static const unsigned char byte_class[256] = {
    ['\t'] = C_VALUE,
    [' '] = C_VALUE,
    ['!'] = C_VALUE | C_TCHAR,
    ['"'] = C_VALUE,
    ['#'] = C_VALUE | C_TCHAR,
    ['$'] = C_VALUE | C_TCHAR,
    ['%'] = C_VALUE | C_TCHAR,
    ['&'] = C_VALUE | C_TCHAR,
    ['\''] = C_VALUE | C_TCHAR,
    ['('] = C_VALUE,
    [')'] = C_VALUE,
    ['*'] = C_VALUE | C_TCHAR,
    ['+'] = C_VALUE | C_TCHAR,
    [','] = C_VALUE,
    ['-'] = C_VALUE | C_TCHAR,
    ['.'] = C_VALUE | C_TCHAR,
    ['/'] = C_VALUE,
    ['0' ... '9'] = C_VALUE | C_TCHAR,
    [':' ... '@'] = C_VALUE,
    ['A' ... 'Z'] = C_VALUE | C_TCHAR,
    ['['] = C_VALUE,
    ['\\'] = C_VALUE,
    [']'] = C_VALUE,
    ['^'] = C_VALUE | C_TCHAR,
    ['_'] = C_VALUE | C_TCHAR,
    ['`'] = C_VALUE | C_TCHAR,
    ['a' ... 'z'] = C_VALUE | C_TCHAR,
    ['{'] = C_VALUE,
    ['|'] = C_VALUE | C_TCHAR,
    ['}'] = C_VALUE,
    ['~'] = C_VALUE | C_TCHAR,
    [0x80 ... 0xff] = C_VALUE,
};

int http_is_tchar(unsigned char c)
{
	return byte_class[c] & C_TCHAR;
}

/* Allowed in a field value: VCHAR, obs-text, SP, HTAB. */
static int is_value_char(unsigned char c)
{
	return byte_class[c] & C_VALUE;
}

const struct http_header *http_find_header(const struct http_head *h, const char *name)
{
	for (unsigned i = 0; i < h->nheaders; i++)
		if (http_str_eq(h->headers[i].name, name))
			return &h->headers[i];
	return NULL;
}

int http_is_event_stream(const struct http_head *h)
{
	const struct http_header *ct = http_find_header(h, "content-type");
	return ct && ct->value.len >= 17 && http_ascii_caseeq(ct->value.p, "text/event-stream", 17);
}

const struct http_header *http_find_only_header(const struct http_head *h, const char *name)
{
	const struct http_header *found = NULL;
	for (unsigned i = 0; i < h->nheaders; i++) {
		if (!http_str_eq(h->headers[i].name, name))
			continue;
		if (found)
			return NULL;
		found = &h->headers[i];
	}
	return found;
}

/*
 * The next token of a comma-separated list at *p (before <end>), without the whitespace
 * around it; empty elements are skipped. 1 with *t set, 0 at the end of the list.
 */
static int field_list_next(const char **p, const char *end, struct http_str *t)
{
	for (;;) {
		while (*p < end && (**p == ' ' || **p == '\t' || **p == ','))
			(*p)++;
		if (*p == end)
			return 0;
		const char *start = *p;
		while (*p < end && **p != ',')
			(*p)++;
		const char *stop = *p;
		while (stop > start && (stop[-1] == ' ' || stop[-1] == '\t'))
			stop--;
		if (stop > start) {
			*t = (struct http_str){start, (uint32_t)(stop - start)};
			return 1;
		}
	}
}

const char *http_list_member_end(const char *p, const char *end)
{
	int in_quote = 0;
	for (; p < end; p++) {
		if (in_quote && *p == '\\' && p + 1 < end)
			p++;
		else if (*p == '"')
			in_quote = !in_quote;
		else if (*p == ',' && !in_quote)
			break;
	}
	return p;
}

int http_list_has(struct http_str list, const char *token, size_t toklen)
{
	const char *p = list.p, *end = list.p + list.len;
	struct http_str t;
	while (field_list_next(&p, end, &t))
		if (t.len == toklen && http_ascii_caseeq(t.p, token, toklen))
			return 1;
	return 0;
}

int http_head_may_be_complete(const char *buf, size_t old_len, size_t len)
{
	size_t from = old_len > 3 ? old_len - 3 : 0;
	for (size_t i = from; i + 1 < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (buf[i + 1] == '\n' || (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n'))
			return 1;
	}
	return 0;
}

/*
 * Find the end of the line starting at <p>. Returns the length of the line without CRLF and
 * sets *next past the CRLF; returns -1 if the line is not complete yet, -2 on bare CR or LF.
 */
static long line_end(const char *p, const char *end, const char **next)
{
	for (const char *q = p; q < end; q++) {
		if (*q == '\r') {
			if (q + 1 == end)
				return -1;
			if (q[1] != '\n')
				return -2;
			*next = q + 2;
			return q - p;
		}
		if (*q == '\n')
			return -2;
	}
	return -1;
}

static enum http_method method_of(struct http_str m)
{
	static const struct {
		const char *name;
		enum http_method meth;
	} table[] = {
	    {"GET", HTTP_GET},	   {"HEAD", HTTP_HEAD},	    {"POST", HTTP_POST},
	    {"PUT", HTTP_PUT},	   {"DELETE", HTTP_DELETE}, {"OPTIONS", HTTP_OPTIONS},
	    {"TRACE", HTTP_TRACE}, {"PATCH", HTTP_PATCH},   {"CONNECT", HTTP_CONNECT},
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (m.len == strlen(table[i].name) && memcmp(m.p, table[i].name, m.len) == 0)
			return table[i].meth;
	return HTTP_OTHER;
}

/* "HTTP/1.x" -> minor (0 or 1); -505 for another HTTP version, -400 for anything else. */
static int parse_version(const char *p, size_t len)
{
	if (len != 8 || memcmp(p, "HTTP/", 5) != 0 || p[6] != '.' || p[5] < '0' || p[5] > '9' ||
	    p[7] < '0' || p[7] > '9')
		return -400;
	if (p[5] != '1' || p[7] > '1')
		return -505;
	return p[7] - '0';
}

/* Content-Length value: 1*DIGIT and nothing else (a list, even of one number, is refused). */
static int parse_content_length(struct http_str v, uint64_t *out)
{
	uint64_t n = 0;
	if (!v.len)
		return -1;
	for (uint32_t i = 0; i < v.len; i++) {
		char c = v.p[i];
		if (c < '0' || c > '9' || n > (UINT64_MAX - 9) / 10)
			return -1;
		n = n * 10 + (uint64_t)(c - '0');
	}
	*out = n;
	return 0;
}

/* Fields that frame or route a message: a Connection option may never name one. */
static int is_framing_field(struct http_str name)
{
	return http_str_eq(name, "content-length") || http_str_eq(name, "transfer-encoding") ||
	       http_str_eq(name, "host");
}

/*
 * Split one Connection field value into h->conn_tokens (once, so that deciding whether a
 * field is hop-by-hop costs a few comparisons, not a scan of the value per field). Returns
 * 0, or <bad> for too many options or, in a request, one naming a framing field.
 */
static int parse_connection(struct http_head *h, struct http_str v, int is_request, int bad,
			    int *keep_alive)
{
	const char *p = v.p, *end = v.p + v.len;
	struct http_str t;
	while (field_list_next(&p, end, &t)) {
		if (http_str_eq(t, "close"))
			h->flags |= HTTP_F_CLOSE;
		else if (http_str_eq(t, "keep-alive"))
			*keep_alive = 1;
		else if (http_str_eq(t, "upgrade"))
			h->flags |= HTTP_F_UPGRADE;
		if (is_framing_field(t)) {
			if (is_request)
				return bad;
			continue; /* a response's framing is rewritten from what was parsed */
		}
		if (h->nconn_tokens == HTTP_MAX_CONN_TOKENS)
			return bad;
		h->conn_tokens[h->nconn_tokens++] = t;
	}
	return 0;
}

int http_conn_names(const struct http_head *h, struct http_str name)
{
	for (unsigned i = 0; i < h->nconn_tokens; i++)
		if (h->conn_tokens[i].len == name.len &&
		    http_ascii_caseeq(h->conn_tokens[i].p, name.p, name.len))
			return 1;
	return 0;
}

/* The index of the first byte of a word (loaded with memcpy) whose high bit is set in
 * <mask>, which has one. */
static inline unsigned first_marked_byte(uint64_t mask)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (unsigned)__builtin_ctzll(mask) / 8;
#else
	return (unsigned)__builtin_clzll(mask) / 8;
#endif
}

/*
 * The end of the run of field-value bytes (is_value_char) from <q>: the first byte before <e>
 * that is not one, or <e>. Eight bytes at a time while eight are left: a byte is refused when
 * it is below 0x80 and either a control other than HTAB (under 0x20) or DEL; each test works
 * on seven bits of a byte, so no carry crosses into its neighbour and every byte is judged
 * exactly as the table judges it. A value is most of a head's bytes (a date, a user agent,
 * a cookie), and the table costs some five instructions a byte.
 */
static const unsigned char *value_span(const unsigned char *q, const unsigned char *e)
{
	const uint64_t high = 0x8080808080808080ull, low7 = 0x7f7f7f7f7f7f7f7full;
	while (e - q >= 8) {
		uint64_t x;
		memcpy(&x, q, 8);
		uint64_t low = x & low7;
		uint64_t from_sp = low + 0x6060606060606060ull; /* high bit: low >= 0x20 */
		uint64_t del = low + 0x0101010101010101ull;	/* high bit: low == 0x7f */
		uint64_t t = low ^ 0x0909090909090909ull;
		uint64_t not_tab = (t + low7) | t; /* high bit: byte != HTAB */
		uint64_t bad = ((~from_sp & not_tab) | del) & ~x & high;
		if (bad)
			return q + first_marked_byte(bad);
		q += 8;
	}
	while (q < e && (byte_class[*q] & C_VALUE))
		q++;
	return q;
}

/*
 * The common case of one field line at <p>: a token, a colon, OWS, value bytes, CRLF, all in
 * the buffer and inside <max_head>. Fills *f and returns the start of the next line, or NULL
 * when the line is anything else (the careful path then reads it).
 */
static const char *field_line_fast(const char *buf, const char *p, const char *end, size_t max_head,
				   struct http_header *f)
{
	const unsigned char *q = (const unsigned char *)p, *e = (const unsigned char *)end;
	while (q < e && (byte_class[*q] & C_TCHAR))
		q++;
	if (q == (const unsigned char *)p || q == e || *q != ':')
		return NULL;
	f->name.p = p;
	f->name.len = (uint32_t)((const char *)q - p);
	q++;
	while (q < e && (*q == ' ' || *q == '\t'))
		q++;
	const unsigned char *v = q;
	q = value_span(q, e);
	if (e - q < 2 || q[0] != '\r' || q[1] != '\n' ||
	    (size_t)((const char *)q + 2 - buf) > max_head)
		return NULL;
	const unsigned char *stop = q;
	while (stop > v && (stop[-1] == ' ' || stop[-1] == '\t'))
		stop--;
	f->value.p = (const char *)v;
	f->value.len = (uint32_t)(stop - v);
	return (const char *)q + 2;
}

/* Parse the field lines from <p>; fills h->headers. Returns head length, 0, or -status. */
static int parse_fields(const char *buf, const char *p, const char *end, size_t max_head,
			struct http_head *h, int bad)
{
	for (;;) {
		const char *next;
		if (h->nheaders < HTTP_MAX_HEADERS) {
			next = field_line_fast(buf, p, end, max_head, &h->headers[h->nheaders]);
			if (next) {
				h->nheaders++;
				p = next;
				continue;
			}
		}
		long n = line_end(p, end, &next);
		if (n == -1)
			return (size_t)(end - buf) >= max_head ? -431 : 0;
		if (n == -2)
			return bad;
		if ((size_t)(next - buf) > max_head)
			return -431;
		if (n == 0) {
			h->head_len = (uint32_t)(next - buf);
			return (int)h->head_len;
		}
		if (*p == ' ' || *p == '\t')
			return bad; /* obs-fold */
		const char *q = p, *eol = p + n;
		while (q < eol && http_is_tchar((unsigned char)*q))
			q++;
		if (q == p || q == eol || *q != ':')
			return bad; /* empty name, bad name char, or space before colon */
		if (h->nheaders == HTTP_MAX_HEADERS)
			return bad == -400 ? -431 : bad;
		struct http_header *f = &h->headers[h->nheaders++];
		f->name.p = p;
		f->name.len = (uint32_t)(q - p);
		q++;
		while (q < eol && (*q == ' ' || *q == '\t'))
			q++;
		const char *v = q;
		for (; q < eol; q++)
			if (!is_value_char((unsigned char)*q))
				return bad;
		while (q > v && (q[-1] == ' ' || q[-1] == '\t'))
			q--;
		f->value.p = v;
		f->value.len = (uint32_t)(q - v);
		p = next;
	}
}

/*
 * Apply RFC 9112 section 6 framing and the connection options to a parsed head. <bad> is
 * the status for a malformed message (-400 for requests, -502 for responses).
 */
static int apply_semantics(struct http_head *h, int is_request, int bad)
{
	int have_cl = 0, have_te = 0, hosts = 0, keep_alive = 0;
	uint64_t cl = 0;
	struct http_str te = {0};

	for (unsigned i = 0; i < h->nheaders; i++) {
		const struct http_header *f = &h->headers[i];
		if (http_str_eq(f->name, "content-length")) {
			if (have_cl || parse_content_length(f->value, &cl) < 0)
				return bad; /* one field with one value, nothing else */
			have_cl = 1;
		} else if (http_str_eq(f->name, "transfer-encoding")) {
			if (have_te)
				return bad; /* several fields: "chunked" can appear only once */
			have_te = 1;
			te = f->value;
		} else if (http_str_eq(f->name, "host")) {
			hosts++;
			if (!h->host.p || is_request)
				h->host = f->value;
		} else if (http_str_eq(f->name, "connection")) {
			if (parse_connection(h, f->value, is_request, bad, &keep_alive) < 0)
				return bad;
		} else if (is_request && http_str_eq(f->name, "expect")) {
			if (!http_str_eq(f->value, "100-continue"))
				return -417;
			h->flags |= HTTP_F_EXPECT_CONTINUE;
		}
	}
	if (h->minor == 0 && keep_alive)
		h->flags &= ~HTTP_F_CLOSE;
	if (is_request && h->minor == 1 && hosts != 1)
		return bad;
	if (is_request && hosts > 1)
		return bad;

	if (have_te) {
		if (have_cl || h->minor == 0)
			return bad;
		if (!http_str_eq(te, "chunked"))
			return http_list_has(te, "chunked", 7) ? bad : (is_request ? -501 : bad);
		h->framing = HTTP_BODY_CHUNKED;
		h->flags |= HTTP_F_HAS_TE;
	} else if (have_cl) {
		h->framing = cl ? HTTP_BODY_LENGTH : HTTP_BODY_NONE;
		h->content_length = cl;
		h->flags |= HTTP_F_HAS_CL;
	} else {
		h->framing = is_request ? HTTP_BODY_NONE : HTTP_BODY_CLOSE;
	}
	return 0;
}

int http_parse_request(const char *buf, size_t len, size_t max_head, struct http_head *h)
{
	const char *p = buf, *end = buf + len, *next;
	memset(h, 0, offsetof(struct http_head, headers));
	h->nheaders = 0;
	h->host.p = NULL;
	h->host.len = 0;
	h->flags = 0;
	h->framing = HTTP_BODY_NONE;
	h->content_length = 0;
	h->nconn_tokens = 0;

	/* skip empty lines before the request line */
	while (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
		p += 2;
	if (p < end && p[0] == '\n')
		return -400;

	long n = line_end(p, end, &next);
	if (n == -1) {
		/* refuse at once what cannot become a request line (TLS on a plain port, binary
		 * junk) instead of waiting for a line end that may never come */
		const char *q = p;
		while (q < end && http_is_tchar((unsigned char)*q))
			q++;
		if (q < end && *q != ' ' && *q != '\r')
			return -400;
		return len >= max_head ? -431 : 0;
	}
	if (n == -2)
		return -400;
	if ((size_t)(next - buf) > max_head)
		return -431;

	const char *eol = p + n, *sp1, *sp2;
	sp1 = memchr(p, ' ', (size_t)n);
	if (!sp1 || sp1 == p)
		return -400;
	for (const char *q = p; q < sp1; q++)
		if (!http_is_tchar((unsigned char)*q))
			return -400;
	sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1)
		return -400;
	for (const char *q = sp1 + 1; q < sp2; q++)
		if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
			return -400;
	int minor = parse_version(sp2 + 1, (size_t)(eol - sp2 - 1));
	if (minor < 0)
		return minor;

	h->method = (struct http_str){p, (uint32_t)(sp1 - p)};
	h->meth = method_of(h->method);
	h->target = (struct http_str){sp1 + 1, (uint32_t)(sp2 - sp1 - 1)};
	h->minor = minor;
	h->flags = minor == 0 ? HTTP_F_CLOSE : 0;

	if (h->meth == HTTP_CONNECT)
		return -501;
	if (h->target.p[0] == '/') {
		h->path = h->target;
	} else if (h->target.len == 1 && h->target.p[0] == '*') {
		if (h->meth != HTTP_OPTIONS)
			return -400;
		h->path = h->target;
	} else if (h->target.len > 7 && strncasecmp(h->target.p, "http://", 7) == 0) {
		const char *auth = h->target.p + 7, *tend = h->target.p + h->target.len;
		const char *slash = memchr(auth, '/', (size_t)(tend - auth));
		if (slash == auth)
			return -400;
		h->path = slash ? (struct http_str){slash, (uint32_t)(tend - slash)}
				: (struct http_str){"/", 1};
	} else {
		return -400;
	}

	int r = parse_fields(buf, next, end, max_head, h, -400);
	if (r <= 0)
		return r;
	int s = apply_semantics(h, 1, -400);
	return s < 0 ? s : r;
}

int http_parse_response(const char *buf, size_t len, size_t max_head, enum http_method req_meth,
			struct http_head *h)
{
	const char *end = buf + len, *next;
	memset(h, 0, offsetof(struct http_head, headers));
	h->nheaders = 0;
	h->host.p = NULL;
	h->host.len = 0;
	h->flags = 0;
	h->content_length = 0;
	h->nconn_tokens = 0;

	long n = line_end(buf, end, &next);
	if (n == -1)
		return len >= max_head ? -502 : 0;
	if (n < 12)
		return -502; /* a bare CR or LF, or shorter than "HTTP/1.1 200" */
	/* "HTTP/1.1 200 OK" or "HTTP/1.1 200" */
	int minor = parse_version(buf, 8);
	if (minor < 0 || buf[8] != ' ')
		return -502;
	const char *s = buf + 9;
	if (s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9')
		return -502;
	if (n > 12 && s[3] != ' ')
		return -502;
	h->status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
	h->minor = minor;
	h->flags = minor == 0 ? HTTP_F_CLOSE : 0;
	if (n > 12) {
		h->reason.p = s + 4;
		h->reason.len = (uint32_t)(n - 13);
		for (uint32_t i = 0; i < h->reason.len; i++)
			if (!is_value_char((unsigned char)h->reason.p[i]))
				return -502;
	}

	int r = parse_fields(buf, next, end, max_head, h, -502);
	if (r <= 0)
		return r == -431 ? -502 : r;
	int sem = apply_semantics(h, 0, -502);
	if (sem < 0)
		return sem;
	if (h->status < 200 || h->status == 204 || h->status == 304 || req_meth == HTTP_HEAD) {
		h->framing = HTTP_BODY_NONE;
		h->content_length = h->status < 200 || h->status == 204 ? 0 : h->content_length;
	}
	return r;
}

int http_head_read(struct http_head_reader *r, const char *buf, size_t len, size_t max,
		   struct http_head *h)
{
	if (len >= max || r->scanned < 32 || http_head_may_be_complete(buf, r->scanned, len)) {
		int n = http_parse_request(buf, len, max, h);
		if (n != 0)
			return n;
	}
	r->scanned = len;
	return 0;
}
