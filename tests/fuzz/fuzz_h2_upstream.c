/*
 * fuzz_h2_upstream.c - libFuzzer target: the upstream HTTP/2 codec's frame path (proxy/up_h2.c)
 * as far as it runs without a worker. A client session set up as up_h2.c sets up its own (no
 * automatic WINDOW_UPDATE, no push) has a few GET streams open; the input is what the backend
 * sends after its (empty) SETTINGS, fed in pieces whose sizes the input's first byte chooses.
 * The callbacks do what up_h2.c's do: each response written as HTTP/1.1 by http/h2head.c's
 * h2resp_* into the stream's buffer (a stream whose response does not fit, or cannot be
 * carried, fails); every other stream's as for a gRPC-Web client (h2resp.grpc_web: its
 * content-type renamed, its trailers the body's last message; one of them a text-mode client's,
 * that message in base64). Checked: every write stays in its
 * buffer; a response that ended whole
 * parses with the strict response parser or is refused, and when its head parses its body's
 * framing is sound and complete; nothing crashes or leaks.
 */
#include "http/body.h"
#include "http/h2head.h"
#include "http/parse.h"

#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OUT_CAP 16384
#define STREAMS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fstream {
	int32_t id;
	struct h2resp rs;
	char out[OUT_CAP];
	size_t len;
	int failed, whole;
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

static void wrote(struct fstream *s, int n)
{
	if (n < 0) {
		s->failed = 1;
		return;
	}
	if ((size_t)n > OUT_CAP - s->len)
		abort(); /* past the room it was given */
	s->len += (size_t)n;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, nghttp2_rcbuf *name,
		     nghttp2_rcbuf *value, uint8_t flags, void *ud)
{
	struct fstream *s = find(ud, f->hd.stream_id);
	(void)ss, (void)flags;
	if (!s || s->failed || f->hd.type != NGHTTP2_HEADERS)
		return 0;
	nghttp2_vec n = nghttp2_rcbuf_get_buf(name), v = nghttp2_rcbuf_get_buf(value);
	wrote(s, h2resp_field(&s->rs, s->out + s->len, OUT_CAP - s->len, (const char *)n.base,
			      n.len, (const char *)v.base, v.len));
	return 0;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *ud)
{
	(void)ss;
	struct fstream *s = f->hd.stream_id ? find(ud, f->hd.stream_id) : NULL;
	if (!s || s->failed)
		return 0;
	int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
	if (f->hd.type == NGHTTP2_HEADERS && !s->rs.head_in)
		wrote(s, h2resp_head_end(&s->rs, s->out + s->len, OUT_CAP - s->len, end));
	if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && end && s->rs.head_in &&
	    !s->failed) {
		wrote(s, h2resp_end(&s->rs, s->out + s->len, OUT_CAP - s->len));
		s->whole = !s->failed;
	}
	return 0;
}

static int on_data(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *ud)
{
	struct fstream *s = find(ud, id);
	(void)flags;
	nghttp2_session_consume(ss, id, len);
	if (!s || s->failed || !s->rs.head_in)
		return 0;
	wrote(s, h2resp_data_begin(&s->rs, s->out + s->len, OUT_CAP - s->len, len));
	if (s->failed || len > OUT_CAP - s->len) {
		s->failed = 1;
		return 0;
	}
	memcpy(s->out + s->len, data, len);
	s->len += len;
	wrote(s, h2resp_data_end(&s->rs, s->out + s->len, OUT_CAP - s->len, len));
	return 0;
}

/* A response that ended whole, as the upstream half would read it. */
static void check(struct fconn *c, struct fstream *s)
{
	size_t at = 0;
	for (;;) {
		int r =
		    http_parse_response(s->out + at, s->len - at, OUT_CAP, HTTP_GET, &c->parsed);
		if (r <= 0)
			return; /* refused (a field the strict parser will not take): a 502 */
		if ((size_t)r > s->len - at)
			abort();
		at += (size_t)r;
		if (c->parsed.status >= 200)
			break;
	}
	struct http_body b;
	http_body_init(&b, c->parsed.framing, c->parsed.content_length);
	if (http_body_scan(&b, s->out + at, s->len - at, 0) < 0 || !b.done)
		abort(); /* the body was written unsound, or short */
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud)
{
	struct fstream *s = find(ud, id);
	(void)ss;
	if (s && s->whole && code == NGHTTP2_NO_ERROR)
		check(ud, s);
	if (s)
		s->id = -1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t settings[] = {0, 0, 0, 4, 0, 0, 0, 0, 0}; /* the backend's */
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
	nghttp2_session_callbacks_set_on_header_callback2(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	if (nghttp2_session_client_new2(&ss, cb, &c, opt))
		goto fail;
	const nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, OUT_CAP / 4},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, OUT_CAP / 2},
	};
	if (nghttp2_submit_settings(ss, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])))
		goto fail;
	const nghttp2_nv nv[] = {
	    {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
	    {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
	    {(uint8_t *)":authority", (uint8_t *)"b", 10, 1, 0},
	    {(uint8_t *)":path", (uint8_t *)"/", 5, 1, 0},
	};
	for (int i = 0; i < STREAMS; i++) {
		int32_t id = nghttp2_submit_request(ss, NULL, nv, 4, NULL, NULL);
		if (id < 0)
			goto fail;
		c.s[i].id = id;
		c.s[i].rs.grpc_web = i & 1;
		c.s[i].rs.grpc_web_text = (i & 3) == 3; /* its trailer message in base64 */
	}
	const uint8_t *out;
	while (nghttp2_session_mem_send(ss, &out) > 0)
		;
	if (nghttp2_session_mem_recv(ss, settings, sizeof(settings)) < 0)
		goto fail;
	for (size_t at = 0; at < size;) {
		size_t k = size - at < piece ? size - at : piece;
		ssize_t r = nghttp2_session_mem_recv(ss, data + at, k);
		if (r < 0)
			break;
		if ((size_t)r != k)
			abort(); /* mem_recv takes all it is given or fails */
		at += k;
		while (nghttp2_session_mem_send(ss, &out) > 0)
			;
	}
fail:
	nghttp2_session_del(ss);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	return 0;
}
