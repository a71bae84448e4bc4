/*
 * fuzz_h2_frames.c - libFuzzer target: the HTTP/2 client frame path as far as it runs without
 * a worker. The input is what a client sends after the connection preface; it is fed to a
 * server session set up as proxy/h2.c sets up its own (no automatic WINDOW_UPDATE, the same
 * SETTINGS, nghttp2's reset and CONTINUATION limits), in pieces whose sizes the input's first
 * byte chooses, as reads would bring it. The callbacks do what h2.c's do with a stream's
 * header list: the header-list count against its limit, the pseudo-header fields kept, the
 * HTTP/1.1 head written by http/h2head.c and read back by the strict parser; and the session
 * is asked to write after each piece, as h2.c flushes. SETTINGS_ENABLE_CONNECT_PROTOCOL is on, and
 * an extended CONNECT with :protocol websocket is written as h2.c writes it, the HTTP/1.1 handshake
 * (h2head_websocket). Checked: the head written stays in its buffer and parses whole or is
 * refused, a handshake that parses is one (an Upgrade without a body), and nothing crashes or
 * leaks.
 */
#include "http/h2head.h"
#include "http/parse.h"

#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_CAP 8192
#define LIST_MAX 16384
#define STREAMS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fstream {
	int32_t id;
	struct h2head hh;
	char head[HEAD_CAP];
	char meth[64], path[256], auth[128];
	size_t mlen, plen, alen;
	size_t list;
	int has_auth, line;
	int websocket; /* :protocol websocket came */
	int ws;	       /* ... on a CONNECT: written as the handshake */
};

struct fconn {
	struct fstream s[STREAMS];
	struct http_head parsed;
};

static struct fstream *find(struct fconn *c, int32_t id)
{
	for (int i = 0; i < STREAMS; i++)
		if (c->s[i].id == id)
			return &c->s[i];
	return NULL;
}

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	struct fconn *c = ud;
	(void)ss;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct fstream *s = find(c, 0);
	if (!s)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	memset(s, 0, sizeof(*s));
	s->id = f->hd.stream_id;
	return 0;
}

static void keep(char *to, size_t cap, size_t *len, const uint8_t *p, size_t n)
{
	*len = n < cap ? n : cap;
	memcpy(to, p, *len);
}

static void line(struct fstream *s)
{
	if (s->line || s->hh.err)
		return;
	s->line = 1;
	s->ws = s->websocket && s->mlen == 7 && !memcmp(s->meth, "CONNECT", 7);
	(void)h2head_begin(&s->hh, s->head, sizeof(s->head), s->ws ? "GET" : s->meth,
			   s->ws ? 3 : s->mlen, s->path, s->plen, s->has_auth ? s->auth : NULL,
			   s->alen);
	if (s->ws)
		(void)h2head_websocket(&s->hh, "dGhlIHNhbXBsZSBub25jZQ==", 24);
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, nghttp2_rcbuf *name,
		     nghttp2_rcbuf *value, uint8_t flags, void *ud)
{
	struct fconn *c = ud;
	(void)ss, (void)flags;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct fstream *s = find(c, f->hd.stream_id);
	if (!s)
		return 0;
	nghttp2_vec n = nghttp2_rcbuf_get_buf(name), v = nghttp2_rcbuf_get_buf(value);
	s->list += n.len + v.len + 32;
	if (s->list > LIST_MAX) {
		s->hh.err = -431;
		return 0;
	}
	if (n.len && n.base[0] == ':') {
		if (n.len == 7 && !memcmp(n.base, ":method", 7))
			keep(s->meth, sizeof(s->meth), &s->mlen, v.base, v.len);
		else if (n.len == 5 && !memcmp(n.base, ":path", 5))
			keep(s->path, sizeof(s->path), &s->plen, v.base, v.len);
		else if (n.len == 10 && !memcmp(n.base, ":authority", 10)) {
			keep(s->auth, sizeof(s->auth), &s->alen, v.base, v.len);
			s->has_auth = 1;
		} else if (n.len == 9 && !memcmp(n.base, ":protocol", 9)) {
			s->websocket = v.len == 9 && !memcmp(v.base, "websocket", 9);
		}
		return 0;
	}
	line(s);
	if (!s->hh.err)
		(void)h2head_field(&s->hh, (const char *)n.base, n.len, (const char *)v.base,
				   v.len);
	return 0;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	struct fconn *c = ud;
	(void)ss;
	struct fstream *s = f->hd.stream_id ? find(c, f->hd.stream_id) : NULL;
	if (!s || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	line(s);
	int n = h2head_end(&s->hh, (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 || s->ws);
	if (n > 0 && !s->hh.err) {
		if ((size_t)n > sizeof(s->head) || s->hh.len != (size_t)n)
			abort();
		struct http_head_reader rd = {0};
		int r = http_head_read(&rd, s->head, (size_t)n, HEAD_CAP, &c->parsed);
		if (r > n)
			abort();
		if (r > 0 && c->parsed.nheaders > HTTP_MAX_HEADERS)
			abort();
		if (r > 0 && s->ws &&
		    (!(c->parsed.flags & HTTP_F_UPGRADE) || c->parsed.framing != HTTP_BODY_NONE))
			abort(); /* a handshake that is none, or carries a body */
	}
	return 0;
}

static int on_data(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *ud)
{
	(void)flags, (void)data, (void)ud;
	nghttp2_session_consume(ss, id, len);
	return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud)
{
	struct fconn *c = ud;
	(void)ss, (void)code;
	struct fstream *s = find(c, id);
	if (s)
		s->id = 0;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	static struct fconn c;
	nghttp2_session_callbacks *cb = NULL;
	nghttp2_option *opt = NULL;
	nghttp2_session *ss = NULL;
	if (!size)
		return 0;
	size_t piece = (size_t)data[0] + 1;
	data++, size--;
	memset(&c, 0, sizeof(c));
	if (nghttp2_session_callbacks_new(&cb) || nghttp2_option_new(&opt))
		goto fail;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback2(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_max_send_header_block_length(opt, HEAD_CAP);
	nghttp2_option_set_stream_reset_rate_limit(opt, 1800, 833);
	if (nghttp2_session_server_new2(&ss, cb, &c, opt))
		goto fail;
	const nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, STREAMS},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, HEAD_CAP / 2},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, LIST_MAX},
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1},
	};
	if (nghttp2_submit_settings(ss, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])))
		goto fail;
	if (nghttp2_session_mem_recv(ss, (const uint8_t *)preface, sizeof(preface) - 1) < 0)
		goto fail;
	for (size_t at = 0; at < size;) {
		size_t k = size - at < piece ? size - at : piece;
		ssize_t r = nghttp2_session_mem_recv(ss, data + at, k);
		if (r < 0)
			break;
		if ((size_t)r != k)
			abort(); /* mem_recv takes all it is given or fails */
		at += k;
		const uint8_t *out;
		while (nghttp2_session_mem_send(ss, &out) > 0)
			;
	}
fail:
	nghttp2_session_del(ss);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	return 0;
}
