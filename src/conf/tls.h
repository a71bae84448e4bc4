/*
 * tls.h - from a listener's tls: section (struct conf_tls) to what it serves
 * (net/tls_listen.h). The schema builds it once to refuse a bad certificate, key or cipher
 * list with its place in the file; the proxy builds it again at start-up.
 */
#ifndef ACCELNET_CONF_TLS_H
#define ACCELNET_CONF_TLS_H

#include "conf/model.h"
#include "net/tls_listen.h"

#include <stddef.h>

/* 0 with *out, or -errno with a message in <err>. */
int conf_tls_build(const struct conf_tls *t, struct net_tls_listener **out, char *err,
		   size_t errlen);

#endif
