/*
 * access.h - the access log on the request path: one line per request into the worker's
 * ring of obs/accesslog.h (access.c's essay says what a line holds).
 *
 * It follows each exchange through its hooks (xhooks.h): at the head it draws the request
 * into access_log.sample and copies its method, path and User-Agent into its context; at
 * the end it writes the line. A request refused before it became an exchange is logged by
 * the codec through access_log_refusal().
 */
#ifndef ACCELNET_PROXY_ACCESS_H
#define ACCELNET_PROXY_ACCESS_H

#include "proxy/exchange.h"
#include "proxy/xhooks.h"

extern const struct xhook access_hook;

/*
 * The method and path of <x>'s request line as copied at its head, and whether the path was
 * cut to fit (*cut): 1 when this exchange is logged (the access log on, sampled in), else 0
 * and nothing copied.
 */
int access_request_line(const struct exchange *x, const char **method, const char **path, int *cut);

/*
 * A request refused before it became an exchange (a malformed head, one too large, one not
 * received in time): one line with what is known -- <status>, the client, the request id it
 * was answered with, the <bytes_out> of that answer, and from the <len> bytes of <head> read
 * so far the method and target when the request line shows them. Called only on that path;
 * sampled like the others.
 */
void access_log_refusal(struct worker *w, const char *client_ip, int status, const char *reqid,
			uint64_t bytes_out, const char *head, size_t len);

#endif
