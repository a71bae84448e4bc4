/*
 * schema_forward.h - what a route, pool or backend changes in what it forwards
 * (docs/forwarding.md): routes[].rewrite (the path and Host sent upstream), request_headers and
 * response_headers (add, set, remove, with %{...} variables) on routes and pools, and the upstream
 * credential (api_key_file, api_key_header) of a pool or backend.
 *
 * Everything is checked and prepared at load, so the request path only copies: a regex is
 * compiled once (libpcre2), a header value is cut into literal pieces and variables, and the
 * credential line ("Authorization: Bearer KEY\r\n") is written once. A reload reads the key
 * file again (a new conf); the key is wiped when its conf is freed. The key never leaves
 * this struct but in that line: no message, /status or /api answer names it.
 */
#ifndef ACCELNET_CONF_SCHEMA_FORWARD_H
#define ACCELNET_CONF_SCHEMA_FORWARD_H

#include "conf/rules.h"

#include <stddef.h>
#include <stdint.h>

/* The variables a header value may name, as %{name}; a literal '%' is written "%%". The
 * syntax is not ${...}, which the config's environment substitution takes. */
#define FWD_VARS(X)                                                                                \
	X(CLIENT_ADDR, "client_addr")                                                              \
	X(TENANT, "tenant")                                                                        \
	X(REQUEST_ID, "request_id")                                                                \
	X(ROUTE, "route")                                                                          \
	X(POOL, "pool")                                                                            \
	X(BACKEND, "backend")
#define FWD_VAR_ENUM(id, name) FWD_VAR_##id,
enum fwd_var { FWD_LITERAL, FWD_VARS(FWD_VAR_ENUM) FWD_NVARS };
#undef FWD_VAR_ENUM

#define FWD_VALUE_MAX 1024   /* bytes of a header value as written in the config */
#define FWD_PIECES_MAX 16    /* literal pieces and variables of one value */
#define FWD_HEADERS_MAX 32   /* add + set + remove of one request_headers or response_headers */
#define FWD_API_KEY_MAX 4096 /* bytes of an api_key_file's key */

struct fwd_piece {
	uint8_t var; /* enum fwd_var; FWD_LITERAL: lit[0..len) */
	uint16_t len;
	const char *lit; /* into the value's text */
};

struct fwd_header {
	char *name;
	char *text; /* the value, "%%" made '%' in its literal pieces */
	struct fwd_piece piece[FWD_PIECES_MAX];
	unsigned npieces;
	unsigned has_vars;
};

/* request_headers / response_headers */
struct fwd_headers {
	struct fwd_header *add, *set;
	size_t nadd, nset;
	char **remove;
	size_t nremove;
	unsigned given;
};

/* routes[].rewrite */
struct fwd_rewrite {
	char *strip_prefix, *prefix;
	char *match, *replace; /* regex: {match, replace} */
	void *re;	       /* pcre2_code compiled from match */
	unsigned ngroups;      /* its capturing groups */
	char *host;	       /* the Host sent; NULL: the client's */
	unsigned on;
};

struct conf_fwd {
	struct fwd_rewrite rewrite; /* routes only */
	struct fwd_headers req, resp;
	char *api_key_file;   /* pools and backends */
	char *api_key_header; /* NULL: Authorization, "Bearer KEY" */
	char *cred_line;      /* "NAME: VALUE\r\n" with the key; NULL: none; a secret */
	size_t cred_len;
	unsigned any_key; /* a pool's: it or a backend of it holds a key */
};

/* The keys, for conf/schema.c's route, pool and backend tables (field: struct conf_fwd **). */
extern const struct rule schema_rewrite_rules[];
extern const struct rule schema_fwd_headers_rules[];
int schema_read_rewrite(struct rules_ctx *x, const struct rule *r, yaml_node_t *v, void *field);
int schema_read_request_headers(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				void *field);
int schema_read_response_headers(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
				 void *field);
int schema_read_api_key_file(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			     void *field);
int schema_read_api_key_header(struct rules_ctx *x, const struct rule *r, yaml_node_t *v,
			       void *field);

/* After a pool's keys are read: read its and its backends' key files (the header given, a
 * file's permissions warned about). 0 or -EINVAL with the message at <item>. */
int schema_forward_check_pool(struct rules_ctx *x, yaml_node_t *item, struct conf_pool *p);

/* After the routes' pools are known: a route (<rf>, its item <item>) may not add or set the
 * field that carries the key of a pool <p> it sends to (its own or its spillover pool): the
 * backend would get two credentials. 0 or -EINVAL with the message at its request_headers. */
int schema_forward_check_route(struct rules_ctx *x, yaml_node_t *item, const struct conf_fwd *rf,
			       const struct conf_pool *p);

/* The name of variable <v> (FWD_VAR_*). */
const char *fwd_var_name(unsigned v);

/* Free <f> (NULL is fine), its key wiped. */
void conf_fwd_free(struct conf_fwd *f);

#endif
