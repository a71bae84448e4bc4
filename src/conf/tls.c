/*
 * tls.c - building a listener's and a pool's TLS contexts from their config (see tls.h).
 */
#include "conf/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int conf_tls_build(const struct conf_tls *t, struct net_tls_listener **out, char *err,
		   size_t errlen)
{
	size_t n = (t->first.cert ? 1 : 0) + t->nmore, k = 0;
	struct net_tls_cert *certs = calloc(n ? n : 1, sizeof(*certs));
	if (!certs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (t->first.cert)
		certs[k++] = (struct net_tls_cert){t->first.cert, t->first.key, t->first.ocsp_file};
	for (size_t i = 0; i < t->nmore; i++)
		certs[k++] =
		    (struct net_tls_cert){t->more[i].cert, t->more[i].key, t->more[i].ocsp_file};
	struct net_tls_listen_opts o = {
	    .certs = certs,
	    .ncerts = n,
	    .ciphers = t->ciphers,
	    .ciphersuites = t->ciphersuites,
	    .groups = t->groups,
	    .min_version = t->min_version && strcmp(t->min_version, "1.3") == 0 ? 13 : 12,
	    .client_ca = t->client_ca,
	    .client_crl = t->client_crl,
	    .client_optional = t->client_auth && strcmp(t->client_auth, "optional") == 0,
	    .verify_depth = (int)t->verify_depth,
	};
	int rc = net_tls_listener_new(&o, out, err, errlen);
	free(certs);
	return rc;
}

int conf_upstream_tls_build(const struct conf_upstream_tls *t, struct ssl_ctx_st **out, char *err,
			    size_t errlen)
{
	struct net_tls_opts o = {
	    .ca = t->ca,
	    .cert = t->cert,
	    .key = t->key,
	    .insecure = !t->verify,
	    .ciphers = t->ciphers,
	    .ciphersuites = t->ciphersuites,
	    .min_version = t->min_version && strcmp(t->min_version, "1.3") == 0 ? 13 : 12,
	    .keep_sessions = 1,
	};
	return net_tls_ctx_client(&o, out, err, errlen);
}
