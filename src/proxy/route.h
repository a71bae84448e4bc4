/*
 * route.h - which route of the config a request takes (see route.c).
 */
#ifndef ACCELNET_PROXY_ROUTE_H
#define ACCELNET_PROXY_ROUTE_H

#include "conf/model.h"
#include "http/parse.h"

#include <stddef.h>

/* The first route of <conf> matching <req> on a connection that asked for TLS server name
 * <sni> (NULL or "": none), whose body names model <model> (NULL: none; routes with
 * match.model then do not match), or NULL. */
const struct conf_route *route_match(const struct conf *conf, const struct http_head *req,
				     const char *sni, const char *model, size_t model_len);
/* The first route matching <req> on everything but match.model, or NULL: with match.model,
 * the route of <req> depends on its body's "model"; and the route that shapes an answer the
 * proxy gives before a route is chosen (routes.api: a refused body on an api: openai model
 * route is answered with OpenAI's error object). */
/* Are all of <conf>'s routes api: openai (so an answer no route matched is shaped as theirs)? */
int route_all_openai(const struct conf *conf);
const struct conf_route *route_match_head(const struct conf *conf, const struct http_head *req,
					  const char *sni);

#endif
