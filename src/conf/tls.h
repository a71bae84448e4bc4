/*
 * tls.h - from a tls: section to what OpenSSL uses: a listener's (struct conf_tls) to what it
 * serves (net/tls_listen.h), a pool's (struct conf_upstream_tls) to the client context its
 * backend connections share (net/tls.h). The schema builds each once to refuse a bad
 * certificate, key, CA file or cipher list with its place in the file; the proxy builds
 * them again at start-up.
 */
#ifndef ACCELNET_CONF_TLS_H
#define ACCELNET_CONF_TLS_H

#include "conf/model.h"
#include "net/tls.h"
#include "net/tls_listen.h"

#include <stddef.h>

/* 0 with *out, or -errno with a message in <err>. */
int conf_tls_build(const struct conf_tls *t, struct net_tls_listener **out, char *err,
		   size_t errlen);

/* A pool's client context, keeping sessions (net_tls_attach_client): 0 with *out (free with
 * net_tls_ctx_free), or -errno with a message in <err>. */
int conf_upstream_tls_build(const struct conf_upstream_tls *t, struct ssl_ctx_st **out, char *err,
			    size_t errlen);

#endif
