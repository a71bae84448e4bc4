/*
 * tls_listen.c - a TLS listener's contexts: certificates grouped by the names they carry,
 * SNI, ALPN, the shared session cache and rotating ticket keys, client certificates and
 * OCSP staples (see tls_listen.h).
 */
#include "net/tls_listen.h"
#include "net/tls.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define SITE_NAMES_MAX 64
#define DEFAULT_CIPHERS                                                                            \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                               \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                               \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define DEFAULT_GROUPS "X25519:P-256:P-384"
#define OCSP_FILE_MAX (64 * 1024)

/* One context: the certificates that name the same hosts. */
struct tls_site {
	SSL_CTX *ctx;
	char *names[SITE_NAMES_MAX]; /* lower case; "*.example.com" for a wildcard */
	size_t nnames;
};

struct ticket_key {
	unsigned char name[16], aes[32], hmac[32];
};

/* An OCSP response to staple for one certificate, until <next_update> (0: no end given). */
struct ocsp_staple {
	X509 *cert;
	unsigned char *der;
	long len;
	time_t next_update;
};

struct net_tls_listener {
	struct tls_site *sites; /* [0] answers by default and holds the session cache */
	size_t nsites;
	struct ocsp_staple *staples;
	size_t nstaples;
	pthread_mutex_t lock; /* the ticket keys */
	long period;	      /* the period cur belongs to */
	struct ticket_key cur, prev;
};

/* <what>, then OpenSSL's first queued error, into <err>. */
static void fail_reason(char *err, size_t errlen, const char *what, const char *file)
{
	unsigned long e = ERR_get_error();
	char buf[200] = "";
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	snprintf(err, errlen, "%s %s%s%s", what, file, buf[0] ? ": " : "", buf);
	ERR_clear_error();
}

static void name_add(char **names, size_t *n, const char *s, size_t len)
{
	if (*n >= SITE_NAMES_MAX || !len || len > 253)
		return;
	char *copy = strndup(s, len);
	if (!copy)
		return;
	for (char *p = copy; *p; p++)
		*p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
	names[(*n)++] = copy;
}

/* The DNS names of the first certificate in <path> (SAN, else the subject's CN). */
static int cert_names(const char *path, char **names, size_t *n, char *err, size_t errlen)
{
	BIO *b = BIO_new_file(path, "r");
	X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	BIO_free(b);
	if (!x) {
		fail_reason(err, errlen, "cannot read the TLS certificate", path);
		return -EINVAL;
	}
	GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		if (g->type == GEN_DNS)
			name_add(names, n, (const char *)ASN1_STRING_get0_data(g->d.dNSName),
				 (size_t)ASN1_STRING_length(g->d.dNSName));
	}
	GENERAL_NAMES_free(gens);
	if (!*n) {
		char cn[256];
		int len = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
						    sizeof(cn));
		if (len > 0)
			name_add(names, n, cn, (size_t)len);
	}
	X509_free(x);
	return 0;
}

static int same_names(char **a, size_t na, char **b, size_t nb)
{
	if (na != nb)
		return 0;
	for (size_t i = 0; i < na; i++) {
		size_t j = 0;
		while (j < nb && strcmp(a[i], b[j]) != 0)
			j++;
		if (j == nb)
			return 0;
	}
	return 1;
}

static int name_matches(const char *pattern, const char *host)
{
	if (strcasecmp(pattern, host) == 0)
		return 1;
	if (pattern[0] != '*' || pattern[1] != '.')
		return 0;
	const char *dot = strchr(host, '.'); /* the wildcard stands for one label */
	return dot && dot != host && strcasecmp(pattern + 1, dot) == 0;
}

static struct tls_site *site_for(struct net_tls_listener *l, const char *host)
{
	for (int wild = 0; wild < 2; wild++)
		for (size_t i = 0; i < l->nsites; i++)
			for (size_t j = 0; j < l->sites[i].nnames; j++) {
				const char *p = l->sites[i].names[j];
				if ((p[0] == '*') == wild && name_matches(p, host))
					return &l->sites[i];
			}
	return NULL;
}

static int on_servername(SSL *s, int *alert, void *arg)
{
	struct net_tls_listener *l = arg;
	const char *name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
	(void)alert;
	struct tls_site *site = name ? site_for(l, name) : NULL;
	if (site && site->ctx != SSL_get_SSL_CTX(s))
		SSL_set_SSL_CTX(s, site->ctx);
	return SSL_TLSEXT_ERR_OK; /* an unknown name gets the default certificate */
}

/* The protocols a connection offers, in the server's order of preference: the first of them
 * the client also offers is chosen. Which list a connection gets is set on its session at
 * attach time (its app data), since listen[].http2 is per listener. */
static const unsigned char alpn_h1[] = "\x08http/1.1";
static const unsigned char alpn_h2[] = "\x02h2\x08http/1.1";

static int on_alpn(SSL *s, const unsigned char **out, unsigned char *outlen,
		   const unsigned char *in, unsigned int inlen, void *arg)
{
	const unsigned char *ours = SSL_get_app_data(s) == alpn_h2 ? alpn_h2 : alpn_h1;
	unsigned int len = ours == alpn_h2 ? sizeof(alpn_h2) - 1 : sizeof(alpn_h1) - 1;
	(void)arg;
	if (SSL_select_next_proto((unsigned char **)out, outlen, ours, len, in, inlen) ==
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_OK;
	return SSL_TLSEXT_ERR_NOACK; /* no common protocol: go on without ALPN (HTTP/1.1) */
}

static void ticket_key_new(struct ticket_key *k)
{
	if (RAND_bytes((unsigned char *)k, sizeof(*k)) != 1)
		memset(k, 0, sizeof(*k)); /* no randomness: a key no ticket can match */
}

/* The keys as of now, rotated first when a period has passed. Under the lock. */
static void ticket_keys_now(struct net_tls_listener *l, struct ticket_key *cur,
			    struct ticket_key *prev)
{
	long now = (long)(time(NULL) / NET_TLS_TICKET_PERIOD_S);
	pthread_mutex_lock(&l->lock);
	if (now != l->period) {
		l->prev = l->cur;
		if (now != l->period + 1)
			ticket_key_new(&l->prev); /* more than a period passed: both are stale */
		ticket_key_new(&l->cur);
		l->period = now;
	}
	*cur = l->cur;
	*prev = l->prev;
	pthread_mutex_unlock(&l->lock);
}

static int ticket_mac_key(EVP_MAC_CTX *hctx, unsigned char *key)
{
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key, 32),
	    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"sha256", 0),
	    OSSL_PARAM_construct_end(),
	};
	return EVP_MAC_CTX_set_params(hctx, params);
}

/* Session tickets: issue under the current key; accept under the current (1) or the
 * previous one (2: accepted, and a new ticket goes out); anything else means a full
 * handshake (0). A TLS 1.3 resumption always gets a new ticket (2): clients use a TLS 1.3
 * ticket once, and without a fresh one the next connection would need a full handshake. */
static int on_ticket_key(SSL *s, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *ectx,
			 EVP_MAC_CTX *hctx, int enc)
{
	struct net_tls_listener *l = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s));
	struct ticket_key cur, prev, *k = NULL;
	int rc = 0;
	ticket_keys_now(l, &cur, &prev);
	if (enc) {
		memcpy(name, cur.name, sizeof(cur.name));
		if (RAND_bytes(iv, 16) != 1 ||
		    EVP_EncryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, cur.aes, iv) != 1 ||
		    ticket_mac_key(hctx, cur.hmac) != 1)
			rc = -1;
		else
			rc = 1;
		goto out;
	}
	if (memcmp(name, cur.name, sizeof(cur.name)) == 0)
		k = &cur, rc = SSL_version(s) >= TLS1_3_VERSION ? 2 : 1;
	else if (memcmp(name, prev.name, sizeof(prev.name)) == 0)
		k = &prev, rc = 2;
	if (k && (ticket_mac_key(hctx, k->hmac) != 1 ||
		  EVP_DecryptInit_ex(ectx, EVP_aes_256_cbc(), NULL, k->aes, iv) != 1))
		rc = -1;
out:
	OPENSSL_cleanse(&cur, sizeof(cur));
	OPENSSL_cleanse(&prev, sizeof(prev));
	return rc;
}

/* OCSP stapling: the client asked (status_request); the certificate chosen has a response
 * still current: it goes out (OpenSSL frees the copy). */
static int on_status(SSL *s, void *arg)
{
	struct net_tls_listener *l = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s));
	X509 *cert = SSL_get_certificate(s);
	(void)arg;
	for (size_t i = 0; cert && i < l->nstaples; i++) {
		const struct ocsp_staple *st = &l->staples[i];
		if (X509_cmp(st->cert, cert) != 0)
			continue;
		if (st->next_update && time(NULL) >= st->next_update)
			return SSL_TLSEXT_ERR_NOACK; /* stale: clients would refuse it */
		unsigned char *copy = OPENSSL_memdup(st->der, (size_t)st->len);
		if (!copy || SSL_set_tlsext_status_ocsp_resp(s, copy, st->len) != 1) {
			OPENSSL_free(copy);
			return SSL_TLSEXT_ERR_NOACK;
		}
		return SSL_TLSEXT_ERR_OK;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

/* The CRLs in PEM file <path> into <store>, checked against each client's certificate. */
static int store_add_crls(X509_STORE *store, const char *path, char *err, size_t errlen)
{
	BIO *b = BIO_new_file(path, "r");
	int n = 0;
	X509_CRL *crl;
	while (b && (crl = PEM_read_bio_X509_CRL(b, NULL, NULL, NULL))) {
		int ok = X509_STORE_add_crl(store, crl);
		X509_CRL_free(crl);
		if (ok != 1)
			break;
		n++;
	}
	BIO_free(b);
	if (!n) {
		fail_reason(err, errlen, "client_crl: no CRL could be read from", path);
		return -EINVAL;
	}
	ERR_clear_error(); /* the end of the file */
	X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
	return 0;
}

/* Mutual TLS on <ctx>: ask for a client certificate signed by one of client_ca's. */
static int ctx_client_auth(SSL_CTX *ctx, const struct net_tls_listen_opts *o, char *err,
			   size_t errlen)
{
	if (SSL_CTX_load_verify_locations(ctx, o->client_ca, NULL) != 1) {
		fail_reason(err, errlen, "cannot load client_ca", o->client_ca);
		return -EINVAL;
	}
	STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->client_ca);
	if (!names) {
		fail_reason(err, errlen, "client_ca: no certificate in", o->client_ca);
		return -EINVAL;
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	if (o->client_crl &&
	    store_add_crls(SSL_CTX_get_cert_store(ctx), o->client_crl, err, errlen) < 0)
		return -EINVAL;
	SSL_CTX_set_verify(
	    ctx, SSL_VERIFY_PEER | (o->client_optional ? 0 : SSL_VERIFY_FAIL_IF_NO_PEER_CERT),
	    NULL);
	SSL_CTX_set_verify_depth(ctx, o->verify_depth);
	return 0;
}

/* A context with the listener's protocol settings and no certificate yet. */
static SSL_CTX *site_ctx_new(struct net_tls_listener *l, const struct net_tls_listen_opts *o,
			     char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		fail_reason(err, errlen, "cannot create a TLS context", "");
		return NULL;
	}
	uint64_t opts =
	    SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION;
#ifdef SSL_OP_ENABLE_KTLS
	opts |= SSL_OP_ENABLE_KTLS;
#endif
	SSL_CTX_set_options(ctx, opts);
	SSL_CTX_set_min_proto_version(ctx, o->min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION);
	SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
				  SSL_MODE_RELEASE_BUFFERS);
	/* one read() per record instead of two (its 5-byte header, then the rest). Safe because
	 * a TLS connection counts as readable until a read says -EAGAIN (proxy/worker.c), so
	 * what OpenSSL read ahead is always read out. */
	SSL_CTX_set_read_ahead(ctx, 1);
	if (SSL_CTX_set_cipher_list(ctx, o->ciphers ? o->ciphers : DEFAULT_CIPHERS) != 1) {
		fail_reason(err, errlen, "tls: ciphers: no usable cipher in", o->ciphers);
		goto fail;
	}
	if (o->ciphersuites && SSL_CTX_set_ciphersuites(ctx, o->ciphersuites) != 1) {
		fail_reason(err, errlen, "tls: ciphersuites: no usable suite in", o->ciphersuites);
		goto fail;
	}
	if (SSL_CTX_set1_groups_list(ctx, o->groups ? o->groups : DEFAULT_GROUPS) != 1) {
		fail_reason(err, errlen, "tls: groups: unknown group in",
			    o->groups ? o->groups : DEFAULT_GROUPS);
		goto fail;
	}
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"accelnet", 8);
	SSL_CTX_set_tlsext_servername_callback(ctx, on_servername);
	SSL_CTX_set_tlsext_servername_arg(ctx, l);
	SSL_CTX_set_alpn_select_cb(ctx, on_alpn, NULL);
	SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, on_ticket_key);
	SSL_CTX_set_tlsext_status_cb(ctx, on_status);
	SSL_CTX_set_app_data(ctx, l);
	if (o->client_ca && ctx_client_auth(ctx, o, err, errlen) < 0)
		goto fail;
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* The DER file <path>, whole, into *der (OPENSSL_free). */
static int read_der(const char *path, unsigned char **der, long *len, char *err, size_t errlen)
{
	BIO *b = BIO_new_file(path, "rb");
	struct stat st;
	if (!b || stat(path, &st) < 0 || st.st_size <= 0 || st.st_size > OCSP_FILE_MAX) {
		BIO_free(b);
		snprintf(err, errlen, "ocsp_file %s: %s", path,
			 b ? "empty, or larger than 64 KiB" : "cannot be read");
		ERR_clear_error();
		return -EINVAL;
	}
	*der = OPENSSL_malloc((size_t)st.st_size);
	int n = *der ? BIO_read(b, *der, (int)st.st_size) : -1;
	BIO_free(b);
	if (n != (int)st.st_size) {
		OPENSSL_free(*der);
		snprintf(err, errlen, "ocsp_file %s: cannot be read", path);
		return -EINVAL;
	}
	*len = n;
	return 0;
}

/*
 * Is the OCSP response <der> fit to staple for <leaf>, issued by one of <chain>? It must be
 * successful, hold a "good" status for exactly this certificate, and be current. 0 with
 * *next (0 when it gives none), or -EINVAL with the reason.
 */
static int ocsp_check(const unsigned char *der, long len, X509 *leaf, STACK_OF(X509) * chain,
		      time_t *next, char *err, size_t errlen)
{
	const unsigned char *p = der;
	OCSP_RESPONSE *resp = d2i_OCSP_RESPONSE(NULL, &p, len);
	OCSP_BASICRESP *basic = NULL;
	OCSP_CERTID *id = NULL;
	X509 *issuer = NULL;
	const char *why = NULL;
	int status, reason;
	ASN1_GENERALIZEDTIME *rev, *this_upd, *next_upd;
	for (int i = 0; i < sk_X509_num(chain) && !issuer; i++)
		if (X509_check_issued(sk_X509_value(chain, i), leaf) == X509_V_OK)
			issuer = sk_X509_value(chain, i);
	if (!resp)
		why = "not a DER OCSP response";
	else if (OCSP_response_status(resp) != OCSP_RESPONSE_STATUS_SUCCESSFUL)
		why = "the response is not \"successful\"";
	else if (!(basic = OCSP_response_get1_basic(resp)))
		why = "the response holds no basic response";
	else if (!issuer)
		why = "the certificate's issuer is not in its chain file, so the response cannot "
		      "be matched to it";
	else if (!(id = OCSP_cert_to_id(NULL, leaf, issuer)))
		why = "out of memory";
	else if (OCSP_resp_find_status(basic, id, &status, &reason, &rev, &this_upd, &next_upd) !=
		 1)
		why = "the response is for another certificate";
	else if (status != V_OCSP_CERTSTATUS_GOOD)
		why = status == V_OCSP_CERTSTATUS_REVOKED ? "the certificate is revoked"
							  : "the certificate's status is unknown";
	else if (OCSP_check_validity(this_upd, next_upd, 300, -1) != 1)
		why = "the response has expired (or is not valid yet)";
	*next = 0;
	if (!why && next_upd) {
		struct tm tm;
		if (ASN1_TIME_to_tm(next_upd, &tm) == 1)
			*next = timegm(&tm);
	}
	OCSP_CERTID_free(id);
	OCSP_BASICRESP_free(basic);
	OCSP_RESPONSE_free(resp);
	ERR_clear_error();
	if (why) {
		snprintf(err, errlen, "%s", why);
		return -EINVAL;
	}
	return 0;
}

/* The OCSP response of certificate <c>, just loaded into <ctx>, checked and kept. */
static int listener_add_staple(struct net_tls_listener *l, SSL_CTX *ctx,
			       const struct net_tls_cert *c, char *err, size_t errlen)
{
	X509 *leaf = SSL_CTX_get0_certificate(ctx);
	STACK_OF(X509) *chain = NULL;
	unsigned char *der;
	long len;
	time_t next;
	char why[200];
	SSL_CTX_get0_chain_certs(ctx, &chain);
	if (read_der(c->ocsp, &der, &len, err, errlen) < 0)
		return -EINVAL;
	if (!leaf || ocsp_check(der, len, leaf, chain, &next, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "ocsp_file %s (for %s): %s", c->ocsp, c->cert,
			 leaf ? why : "no certificate");
		OPENSSL_free(der);
		return -EINVAL;
	}
	X509_up_ref(leaf);
	l->staples[l->nstaples++] = (struct ocsp_staple){leaf, der, len, next};
	return 0;
}

static int site_add_cert(SSL_CTX *ctx, const struct net_tls_cert *c, char *err, size_t errlen)
{
	if (SSL_CTX_use_certificate_chain_file(ctx, c->cert) != 1) {
		fail_reason(err, errlen, "cannot load the TLS certificate", c->cert);
		return -EINVAL;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		fail_reason(err, errlen,
			    "cannot load the TLS key (or it does not match its certificate)",
			    c->key);
		return -EINVAL;
	}
	return 0;
}

/* Put certificate <c> into the site naming the same hosts, or a new one. */
static int listener_add_cert(struct net_tls_listener *l, const struct net_tls_listen_opts *o,
			     const struct net_tls_cert *c, char *err, size_t errlen)
{
	char *names[SITE_NAMES_MAX];
	size_t n = 0;
	int rc = cert_names(c->cert, names, &n, err, errlen);
	if (rc)
		return rc;
	struct tls_site *site = NULL;
	for (size_t i = 0; i < l->nsites && !site; i++)
		if (same_names(names, n, l->sites[i].names, l->sites[i].nnames))
			site = &l->sites[i];
	if (site) {
		for (size_t i = 0; i < n; i++)
			free(names[i]);
	} else {
		site = &l->sites[l->nsites];
		memcpy(site->names, names, n * sizeof(names[0]));
		site->nnames = n;
		l->nsites++; /* from here on the site's names are freed with the listener */
		if (!(site->ctx = site_ctx_new(l, o, err, errlen)))
			return -EINVAL;
	}
	if ((rc = site_add_cert(site->ctx, c, err, errlen)) < 0)
		return rc;
	return c->ocsp ? listener_add_staple(l, site->ctx, c, err, errlen) : 0;
}

int net_tls_listener_new(const struct net_tls_listen_opts *o, struct net_tls_listener **out,
			 char *err, size_t errlen)
{
	int rc = -ENOMEM;
	struct net_tls_listener *l = calloc(1, sizeof(*l));
	if (!l || !(l->sites = calloc(o->ncerts ? o->ncerts : 1, sizeof(*l->sites))) ||
	    !(l->staples = calloc(o->ncerts ? o->ncerts : 1, sizeof(*l->staples)))) {
		snprintf(err, errlen, "out of memory");
		if (l)
			free(l->sites);
		free(l);
		return -ENOMEM;
	}
	pthread_mutex_init(&l->lock, NULL);
	l->period = -2; /* the first ticket makes both keys */
	if (!o->ncerts) {
		snprintf(err, errlen, "tls: a certificate and its key are required");
		rc = -EINVAL;
		goto fail;
	}
	for (size_t i = 0; i < o->ncerts; i++)
		if ((rc = listener_add_cert(l, o, &o->certs[i], err, errlen)))
			goto fail;
	*out = l;
	return 0;
fail:
	net_tls_listener_free(l);
	return rc;
}

void net_tls_listener_free(struct net_tls_listener *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nsites; i++) {
		SSL_CTX_free(l->sites[i].ctx);
		for (size_t j = 0; j < l->sites[i].nnames; j++)
			free(l->sites[i].names[j]);
	}
	free(l->sites);
	for (size_t i = 0; i < l->nstaples; i++) {
		X509_free(l->staples[i].cert);
		OPENSSL_free(l->staples[i].der);
	}
	free(l->staples);
	pthread_mutex_destroy(&l->lock);
	OPENSSL_cleanse(&l->cur, sizeof(l->cur));
	OPENSSL_cleanse(&l->prev, sizeof(l->prev));
	free(l);
}

int net_tls_listener_attach(struct net_tls_listener *l, struct net_conn *c, int h2)
{
	int rc = net_tls_attach(c, l->sites[0].ctx, 1, NULL);
	if (!rc && h2)
		SSL_set_app_data(c->ssl, (void *)alpn_h2);
	return rc;
}

/* <s>[0..len) into <out> (room for <cap> bytes and the NUL), every byte outside printable
 * ASCII, and unless <keep_backslash> every backslash, written as \XX. 0, or -E2BIG when it
 * does not fit. */
static int copy_escaped(char *out, size_t cap, const unsigned char *s, size_t len,
			int keep_backslash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = s[i];
		int plain = ch >= 0x20 && ch < 0x7f && (ch != '\\' || keep_backslash);
		if (k + (plain ? 1 : 3) > cap) {
			out[0] = 0;
			return -E2BIG;
		}
		if (plain) {
			out[k++] = (char)ch;
		} else {
			out[k++] = '\\';
			out[k++] = hex[ch >> 4];
			out[k++] = hex[ch & 15];
		}
	}
	out[k] = 0;
	return 0;
}

/* The first URI, DNS or email subjectAltName of <x>, escaped into <out>. */
static int first_san(X509 *x, char *out, size_t cap)
{
	GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	int rc = 0;
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		if (g->type != GEN_URI && g->type != GEN_DNS && g->type != GEN_EMAIL)
			continue;
		const ASN1_IA5STRING *v = g->d.ia5;
		rc = copy_escaped(out, cap, ASN1_STRING_get0_data(v), (size_t)ASN1_STRING_length(v),
				  0);
		break;
	}
	GENERAL_NAMES_free(gens);
	return rc;
}

/* The verified client certificate's subject, SAN and CN into <f>. */
static int peer_facts(SSL *ssl, struct net_tls_facts *f)
{
	X509 *x = SSL_get0_peer_certificate(ssl);
	if (!x || SSL_get_verify_result(ssl) != X509_V_OK)
		return 0;
	X509_NAME *name = X509_get_subject_name(x);
	BIO *b = BIO_new(BIO_s_mem());
	char *text = NULL;
	long len = -1;
	if (b && X509_NAME_print_ex(b, name, 0, XN_FLAG_RFC2253) >= 0)
		len = BIO_get_mem_data(b, &text);
	/* RFC 4514 as OpenSSL writes it: its backslash escapes (\, \+ \\ and \XX for bytes outside
	 * ASCII) stay as they are, or "CN=a\,O=b" (one CN) would read "CN=a\5C,O=b" (two RDNs) */
	int rc = len < 0 ? -ENOMEM
			 : copy_escaped(f->subject, NET_TLS_SUBJECT_MAX, (unsigned char *)text,
					(size_t)len, 1);
	BIO_free(b);
	if (!rc)
		rc = first_san(x, f->san, NET_TLS_NAME_MAX);
	int last = -1, i;
	while ((i = X509_NAME_get_index_by_NID(name, NID_commonName, last)) >= 0)
		last = i;
	const ASN1_STRING *cn =
	    last >= 0 ? X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, last)) : NULL;
	if (!rc && cn)
		rc = copy_escaped(f->cn, NET_TLS_NAME_MAX, ASN1_STRING_get0_data(cn),
				  (size_t)ASN1_STRING_length(cn), 0);
	ERR_clear_error();
	if (!rc)
		f->client_cert = 1;
	return rc;
}

int net_tls_facts_get(struct net_conn *c, struct net_tls_facts *f)
{
	f->version = f->cipher = f->sni = "";
	f->resumed = f->ktls_send = f->client_cert = f->alpn_h2 = 0;
	f->subject[0] = f->san[0] = f->cn[0] = 0;
	if (!c->ssl)
		return 0;
	const char *sni = SSL_get_servername(c->ssl, TLSEXT_NAMETYPE_host_name);
	f->version = SSL_get_version(c->ssl);
	f->cipher = SSL_get_cipher_name(c->ssl);
	f->sni = sni ? sni : "";
	f->resumed = SSL_session_reused(c->ssl);
	f->ktls_send = BIO_get_ktls_send(SSL_get_wbio(c->ssl)) > 0;
	const unsigned char *proto;
	unsigned int plen;
	SSL_get0_alpn_selected(c->ssl, &proto, &plen);
	f->alpn_h2 = plen == 2 && !memcmp(proto, "h2", 2);
	return peer_facts(c->ssl, f);
}

int net_tls_sniff_plain_http(struct net_conn *c)
{
	unsigned char first;
	ssize_t n = net_conn_peek(c, &first, 1);
	if (n < 0)
		return n == -EAGAIN ? -EAGAIN : 0;
	return n == 1 && first >= 'A' && first <= 'Z';
}

void net_tls_listener_detach(struct net_conn *c)
{
	SSL_free(c->ssl);
	c->ssl = NULL;
}

int net_tls_hello_oversized(struct net_conn *c, size_t max)
{
	unsigned char h[9];
	ssize_t n = net_conn_peek(c, h, sizeof(h));
	if (n < 0)
		return n == -EAGAIN ? -EAGAIN : 0;
	if (n == 0 || h[0] != 0x16)
		return 0; /* closed, or not a TLS handshake record: the handshake says no */
	if (n < (ssize_t)sizeof(h))
		return -EAGAIN;
	size_t len = (size_t)h[6] << 16 | (size_t)h[7] << 8 | h[8];
	return h[5] == 0x01 && len > max;
}
