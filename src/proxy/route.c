/*
 * route.c - matching a request head (and the TLS server name its connection asked for)
 * against the routes of the config, in order; the first route whose every given condition
 * holds wins. A route with match.model also needs the request body's "model" (read before
 * routing by the stage "model", stages.h) to match its pattern; a request with no model
 * (no body, not JSON, no such field, or not within the bytes read) never matches it.
 *
 * The path matched is the request's normal form (http/target.h, brought to it as the head
 * was read), so its spellings cannot dodge a prefix. A reserved character stays encoded in
 * that form ("%3A"), yet a backend that decodes the path reads it as the character itself:
 * so a byte of path_prefix matches that byte or an escape of it ("/v1/m:gen" matches
 * "/v1/m%3Agen").
 */
#include "proxy/route.h"
#include "core/glob.h"
#include "core/hex.h"
#include "runtime/pool.h"

#include <string.h>
#include <strings.h>

static int host_matches(const char *want, struct http_str host)
{
	/* compare without the port: "api.example.com:8080" matches "api.example.com"; and
	 * without the root's dot (on either side): "api.example.com." is that name too (DNS, and
	 * nginx drops it before choosing a server), so it may not dodge the route */
	uint32_t len = host.len;
	size_t wlen = strlen(want);
	if (wlen > 1 && want[wlen - 1] == '.')
		wlen--;
	if (len && host.p[0] != '[') {
		const char *colon = memchr(host.p, ':', len);
		if (colon)
			len = (uint32_t)(colon - host.p);
		if (len > 1 && host.p[len - 1] == '.')
			len--;
	}
	return wlen == len && strncasecmp(want, host.p, len) == 0;
}

/* match.sni: the exact name, or "*.domain" for one label more; no name matches neither. */
static int sni_matches(const char *want, const char *sni)
{
	if (!sni || !*sni)
		return 0;
	if (want[0] != '*')
		return strcasecmp(want, sni) == 0;
	const char *dot = strchr(sni, '.');
	return dot && dot != sni && strcasecmp(want + 1, dot) == 0;
}

/* Does <path> begin with <prefix>, a prefix byte matching itself or its escape in <path>? */
static int prefix_matches(const char *prefix, struct http_str path)
{
	uint32_t i = 0;
	for (const unsigned char *c = (const unsigned char *)prefix; *c; c++) {
		if (i < path.len && (unsigned char)path.p[i] == *c) {
			i++;
			continue;
		}
		if (*c == '%' || path.len - i < 3 || path.p[i] != '%')
			return 0;
		int hi = hex_value(path.p[i + 1]), lo = hex_value(path.p[i + 2]);
		if (hi < 0 || lo < 0 || (hi << 4 | lo) != *c)
			return 0;
		i += 3;
	}
	return 1;
}

/* Is the method of <req> <want>? A HEAD is a GET too: a server runs its GET handler for a HEAD
 * (RFC 9110 9.3.2; Starlette, and so FastAPI, adds HEAD to every GET route), so a GET
 * route's guard must meet it, not the route after. */
static int method_matches(const char *want, const struct http_head *req)
{
	if (strlen(want) == req->method.len && !memcmp(want, req->method.p, req->method.len))
		return 1;
	return req->meth == HTTP_HEAD && strcmp(want, "GET") == 0;
}

/* Does route <r> match <req> on everything but match.model? */
static int route_matches(const struct conf_route *r, const struct http_head *req, const char *sni)
{
	if (!prefix_matches(r->path_prefix, req->path))
		return 0;
	if (r->host && !host_matches(r->host, req->host))
		return 0;
	if (r->sni && !sni_matches(r->sni, sni))
		return 0;
	if (r->method && !method_matches(r->method, req))
		return 0;
	if (r->header_name) {
		const struct http_header *h = http_find_header(req, r->header_name);
		if (!h)
			return 0;
		if (r->header_value && (strlen(r->header_value) != h->value.len ||
					memcmp(r->header_value, h->value.p, h->value.len) != 0))
			return 0;
	}
	return 1;
}

const struct conf_route *route_match(const struct conf *conf, const struct http_head *req,
				     const char *sni, const char *model, size_t model_len)
{
	for (size_t i = 0; i < conf->nroutes; i++) {
		const struct conf_route *r = &conf->routes[i];
		if (r->model && (!model || !glob_match(r->model, model, model_len)))
			continue;
		if (route_matches(r, req, sni))
			return r;
	}
	return NULL;
}

int route_all_openai(const struct conf *conf)
{
	for (size_t i = 0; i < conf->nroutes; i++)
		if (conf->routes[i].api != CONF_API_OPENAI)
			return 0;
	return conf->nroutes > 0;
}

const struct conf_route *route_match_head(const struct conf *conf, const struct http_head *req,
					  const char *sni)
{
	for (size_t i = 0; i < conf->nroutes; i++)
		if (route_matches(&conf->routes[i], req, sni))
			return &conf->routes[i];
	return NULL;
}
