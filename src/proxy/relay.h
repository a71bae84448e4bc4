/*
 * relay.h - the HTTP/1 client side of an exchange's bytes: reading the request body before
 * admission, and relaying request and response between the client and the backend, whose
 * side is the upstream half's (up_h1.h: it writes the request upstream and reads the
 * response, and hands the client side interims, a 101 and the final head through the codec's
 * operations, which land here).
 *
 * Bytes are not copied between the sockets: request bodies are written upstream straight
 * from the client's input buffer, responses to the client straight from the upstream
 * connection's input buffer, each time gathered with the head in front in one write. The
 * one copy is of a body outgrowing a plain buffer into a body buffer (client_grow_in), and
 * of what follows it back (client_shrink_in), once per such request. Framing (http/body.h)
 * is tracked only to know where a body ends; the bytes that belong to it are relayed as
 * they are, so Server-Sent Events reach the client one event at a time. Every byte moves
 * through the transport (net/conn.h), never by splice or sendfile, so a TLS client or a TLS
 * backend (pools.tls) takes the same path as a plain one.
 */
#ifndef ACCELNET_PROXY_RELAY_H
#define ACCELNET_PROXY_RELAY_H

#include "proxy/client.h"
#include "proxy/exchange.h"

/*
 * Before admission: read the request body until it is complete, or limits.body_buffer_bytes
 * of it (and, for prefix-affinity, hash.body_max_bytes) are here, or no buffer can hold more.
 * Then the prompt key is taken from what arrived and the request goes on to admission; the
 * rest of a longer body streams, under limits.min_body_rate and timeouts.body_ms.
 */
enum run relay_await_body(struct client *cl);

/* The body read before admission is in, at <body> (x->req.ready bytes; NULL: none): what the
 * stages decide on it (the strict JSON view, the token note, the request body hooks, the
 * affinity key or prompt blocks, the model among backends). Any codec's, once its body is
 * read. */
enum run relay_body_in(struct exchange *x, const char *body);
/* Extend x->req.ready over the body bytes in <in> (NULL: none yet), whatever the codec:
 * 0, -400 malformed, -413 larger than limits.max_body_bytes. */
int relay_scan_body(struct exchange *x, struct buf *in);
/* relay_scan_body() answered <bad>: the client's answer, 413 or 400 (the connection closes). */
enum run relay_reply_bad_body(struct exchange *x, int bad);

/* routes.sse_heartbeat_ms (sse.h): queue the proxy's event-stream head, the first time, and
 * one SSE comment, unless the last one is still unread. */
void relay_heartbeat(struct client *cl);

/* The codec operations the upstream half (up_h1.h) calls, for HTTP/1 clients: an interim
 * response (to 1.1 clients, a few of them), a 101 (tunnel.h), the final head (rewritten for
 * the client, or continuing the proxy's early event stream). */
enum run relay_interim(struct client *cl, const struct http_head *h, size_t len);
enum run relay_upgrade(struct client *cl, const struct http_head *h, size_t len);
enum run relay_response_head(struct client *cl, const struct http_head *h);

/* Move what can move, both ways, until nothing more can; finish the exchange at its end. */
enum run relay_run(struct client *cl);

#endif
