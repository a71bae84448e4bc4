/*
 * model.h - the parsed configuration: plain structs, no runtime state (the model every part
 * of the config layer fills in; its own module, so the rule engine and the schema both build
 * on it without an include circle through conf.h).
 *
 * A struct conf is built whole from YAML by conf_load_*(), checked, and then only read. The
 * proxy builds its runtime state (backend health, counters, sockets) beside it, never in it,
 * so a reload can build a new conf and swap it in without touching live counters.
 */
#ifndef ACCELNET_CONF_MODEL_H
#define ACCELNET_CONF_MODEL_H

#include "policy/lb.h"
#include "policy/qdisc.h"
#include "policy/spend_math.h"
#include "net/addr.h"

#include <stddef.h>
#include <stdint.h>

/* A certificate and its key (PEM files), and an OCSP response to staple (DER; NULL: none). */
struct conf_tls_cert {
	char *cert, *key, *ocsp_file;
};

/* Distinct names of the fields only the proxy sets, over the whole config (the listeners'
 * client_subject_header / client_san_header, the auth routes' identity_header): every
 * request drops all of them that the client sent (proxy/stages.c). */
#define CONF_GUARDED_FIELDS_MAX 16

struct conf_fwd; /* what a route, pool or backend changes in what it forwards */

/* listen[].tls: what the listener serves over TLS (net/tls_listen.h has the defaults). */
struct conf_tls {
	struct conf_tls_cert first; /* cert, key */
	struct conf_tls_cert *more; /* certificates: more, chosen by SNI and key type */
	size_t nmore;
	char *ciphers;	       /* TLS 1.2 cipher list; NULL: the default */
	char *ciphersuites;    /* TLS 1.3; NULL: OpenSSL's */
	char *groups;	       /* NULL: X25519:P-256:P-384 */
	char *min_version;     /* "1.2" (default) or "1.3" */
	char *client_ca;       /* mutual TLS: CAs a client certificate must chain to; NULL: off */
	char *client_crl;      /* CRLs checked against client certificates; NULL: none */
	char *client_auth;     /* "required" (default) or "optional" */
	unsigned verify_depth; /* intermediates allowed in a client's chain (default 3) */
	char *client_subject_header; /* the verified subject, to the backend; X-Client-Subject */
	char *client_san_header;     /* its first SAN; X-Client-SAN */
	unsigned facts_headers;	     /* send X-TLS-Version, X-TLS-Cipher, X-TLS-SNI */
	unsigned reload_s;	     /* look at the files this often, reload if changed; 0: never */
};

/* listen[].sni[]: a ClientHello naming <name> ("*.example.com": one label under it; stored
 * lower case) goes to pools[pool] (conf/schema_l4.h). */
struct conf_sni_route {
	char *name;
	char *pool_name;
	size_t pool;
};

struct conf_listen {
	char *address;
	struct net_addr addr;
	struct conf_tls *tls; /* listen[].tls; NULL: plain TCP */
	unsigned shared;      /* listen[].reuse_port: shared: another process may listen too */
	unsigned http2;	      /* listen[].http2: HTTP/2 taken (h2c by its preface), default 1 */
	/* listen[].mode: tcp: raw TCP relayed to pools[pool] (proxy/l4.h); 0: HTTP */
	unsigned l4;
	char *pool_name;	    /* listen[].pool as given ... */
	size_t pool;		    /* ... and its index, once every pool is read */
	unsigned idle_ms, drain_ms; /* listen[].idle_ms, listen[].drain_ms (mode: tcp) */
	struct conf_sni_route *sni; /* listen[].sni: TLS passed through by server name */
	size_t nsni;
};

/* pools[].tls: TLS to the pool's backends (net/tls.h builds one client context of it). */
struct conf_upstream_tls {
	char *ca;	    /* PEM CA bundle; NULL: the system's store */
	unsigned verify;    /* check the backend's certificate (default 1) */
	char *sni;	    /* NULL: the backend's host when it is a name */
	char *verify_name;  /* NULL: the SNI, else the backend's host or address */
	char *cert, *key;   /* client certificate; NULL: none */
	char *ciphers;	    /* TLS 1.2 list; NULL: OpenSSL's */
	char *ciphersuites; /* TLS 1.3; NULL: OpenSSL's */
	char *min_version;  /* "1.2" (default) or "1.3" */
};

/* backends[].discover: how a backend given by name is found. */
enum conf_discover {
	DISCOVER_NONE, /* a fixed address, resolved once at load */
	DISCOVER_A,    /* "NAME:PORT": every A and AAAA record, at that port */
	DISCOVER_SRV,  /* "NAME": its SRV records' targets, ports and weights */
};

/* pools[].protocol, backends[].protocol: how the proxy speaks to a backend (proxy/up_h2.h). */
enum conf_protocol {
	CONF_PROTO_HTTP1, /* HTTP/1.1 (over TLS with pools[].tls) */
	CONF_PROTO_H2,	  /* HTTP/2 over TLS, ALPN h2: the pool has tls */
	CONF_PROTO_H2C,	  /* HTTP/2 over plain TCP, with prior knowledge */
};

struct conf_backend {
	struct conf_listen ep;	    /* where the backend listens */
	unsigned protocol;	    /* enum conf_protocol: its own, else the pool's */
	unsigned protocol_given;    /* backends[].protocol was given */
	unsigned http2_connections; /* its pool's: connections to it per worker, for HTTP/2 */
	unsigned weight;	    /* 1..1000, default 1 */
	unsigned max_concurrency;   /* 0: no cap */
	/* backends[].tls: this backend's own sni and verify_name (NULL: the pool's) */
	struct {
		char *sni, *verify_name;
		int given;
	} tls;
	/* with pools[].tls, resolved once read: the name sent as SNI (NULL: none) and the one
	 * its certificate must carry (NULL: not checked, verify off) */
	char *tls_sni, *tls_verify_name;
	/* backends[].models: the models (and LoRA adapters) it serves, each once; none given:
	 * any model (see docs/config.md for how a pool chooses) */
	char **models;
	size_t nmodels;
	char *kv_events;	/* backends[].kv_events: "tcp://HOST:PORT" of its KV-cache events */
	char *kv_events_replay; /* backends[].kv_events_replay: its replay socket, or NULL */
	/* backends[].discover: the address is a DNS name, re-resolved while running
	 * (control/discover.h) into up to discover_max backends of the pool */
	enum conf_discover discover;
	char *discover_name;	/* the name asked (A/AAAA) or the SRV name */
	unsigned discover_port; /* discover: a: the port of every address found */
	unsigned discover_max;	/* backends[].max_backends: slots kept for it (default 16) */
	struct conf_fwd *fwd;	/* api_key_file (conf/schema_forward.h); NULL: none */
};

#define CONF_MODEL_MAX 255 /* bytes of a model name, or of a match.model pattern */

#define CONF_HEALTH_PATH_MAX 256
#define CONF_BODY_BUFFER_MAX (64u << 20)
#define CONF_MAX_HEADERS 96 /* the parser's table (HTTP_MAX_HEADERS): limits.max_headers' top */

struct conf_health {
	int enabled; /* a health: block was given */
	char *path;
	unsigned interval_ms, timeout_ms, fall, rise;
	unsigned grpc; /* health.protocol: grpc: grpc.health.v1.Health/Check, not GET path */
};

/* pools[].engine_metrics: the backends' own Prometheus metrics, scraped as a load signal. */
struct conf_engine_metrics {
	int enabled; /* an engine_metrics: block was given */
	char *path;
	unsigned interval_ms, timeout_ms;
	uint64_t max_bytes; /* a longer answer is a failed scrape */
};

/* pools[].engine: the backends are spoken to in their engine's own API, not OpenAI HTTP: the
 * proxy tokenizes with <model>'s tokenizer (models:) and detokenizes (proxy/engine_grpc.h). */
enum conf_engine_api { CONF_ENGINE_OPENAI, CONF_ENGINE_SGLANG_GRPC, CONF_ENGINE_VLLM_GRPC };
struct conf_tokmodel;
struct conf_engine {
	unsigned api;			/* enum conf_engine_api */
	char *model;			/* the models: entry whose tokenizer it uses */
	const struct conf_tokmodel *tm; /* ... resolved once the whole config is read */
};

/* pools[].disaggregation: this pool decodes; a prefill pool prefills first (proxy/pd.h). */
enum conf_pd_protocol { CONF_PD_VLLM, CONF_PD_SGLANG };
struct conf_pd {
	int enabled;
	char *prefill_name;	   /* prefill_pool as given ... */
	size_t prefill_pool;	   /* ... and its index, once every pool is read */
	unsigned protocol;	   /* enum conf_pd_protocol */
	unsigned min_prompt_bytes; /* a shorter body decodes in place */
	unsigned decode_only;	   /* on_prefill_failure: decode_only (else retry, then fail) */
	unsigned bootstrap_port;   /* sglang: the prefill backends' bootstrap port; 0: theirs */
};

/* Outlier ejection: take a misbehaving backend out for a while. */
struct conf_outlier {
	unsigned consecutive_5xx;  /* this many 5xx in a row eject it; 0: never */
	unsigned latency_factor;   /* latency above this many times its peers' median; 0: never */
	unsigned ejection_ms;	   /* first ejection; each one soon after doubles it */
	unsigned max_ejection_pct; /* never more than this share of the pool out at once */
};

enum hash_key {
	HASH_KEY_CLIENT_IP,
	HASH_KEY_PATH,
	HASH_KEY_HEADER, /* hash.header */
	HASH_KEY_PROMPT, /* prefix-affinity: the start of the JSON prompt */
};

struct conf_hash {
	enum hash_key key;
	char *header;		 /* HASH_KEY_HEADER: its name */
	unsigned prefix_bytes;	 /* HASH_KEY_PROMPT: how much of the prompt names it */
	unsigned body_max_bytes; /* HASH_KEY_PROMPT: the most of a body read for it */
};

/* pools[].session: a conversation kept on one backend (policy/stick.h, runtime/pick.c). */
struct conf_session {
	int enabled;		/* the section is given */
	char *header;		/* its value names the session ("x-session-id"); "": none */
	char *cookie;		/* this cookie's value names it; NULL: none */
	unsigned responses_api; /* previous_response_id names it; answers' ids are learned */
	unsigned ttl_s;		/* an entry lasts this long after its last use */
	unsigned max_entries;	/* the table's size (bounded: the oldest go first) */
};

struct conf_pool {
	char *name;
	const struct lb_ops *balance;
	struct lb_state lb;
	struct conf_backend *backends;
	size_t nbackends;
	struct conf_health health;
	unsigned fail_timeout_ms; /* passive: how long a backend that refused stays out */
	const struct qdisc_ops *queue_discipline;
	unsigned queue_max; /* requests waiting for a slot, at most */
	unsigned queue_timeout_ms;
	unsigned ewma_decay_ms;	   /* peak-EWMA: time for an old latency to fade to 1/e */
	unsigned slow_start_ms;	   /* ramp after a backend comes back; 0: none */
	unsigned retry_budget_pct; /* retries stay under this share of requests */
	struct conf_outlier outlier;
	struct conf_hash hash;
	char *load_header;	    /* a backend's own queue depth, read from its responses */
	unsigned load_ttl_ms;	    /* ... and believed this long */
	unsigned hedge_after_ms;    /* send an idempotent request again after this; 0: never */
	unsigned protocol;	    /* enum conf_protocol: pools[].protocol (each backend's own) */
	unsigned http2_connections; /* HTTP/2 backends: connections to each, per worker */
	int can_queue;		    /* some backend has max_concurrency: requests may wait */
	int has_models;		    /* some backend lists backends[].models */
	struct conf_upstream_tls *tls; /* NULL: plain TCP to the backends */
	struct conf_engine_metrics engine_metrics;
	struct conf_engine engine; /* engine: (api openai: none) */
	struct conf_pd pd;	   /* disaggregation: */
	int has_kv_events;	   /* some backend has kv_events */
	/* l4: a listener with mode: tcp relays to it (no route may); proxy_protocol:
	 * pools[].proxy_protocol, 0 none, else its version (1, 2) */
	int l4;
	unsigned proxy_protocol;
	/* pools[].spare_backends: slots kept for backends added at run time through the admin
	 * API (control/manage.h); CONF_SPARE_DEFAULT until the pool is checked */
	unsigned spare_backends;
	struct conf_fwd *fwd; /* request_headers, response_headers, api_key_file; NULL: none */
	struct conf_session session;
};

#define CONF_SPARE_DEFAULT 4u /* spare_backends when not given (fewer if the pool is full) */

/* routes[].auth.client_cert.tenant_from: which part of a verified client certificate names
 * the tenant. */
enum conf_cert_tenant {
	CERT_TENANT_NONE,	/* no client_cert: certificates are not looked at */
	CERT_TENANT_SUBJECT_CN, /* the subject's CN */
	CERT_TENANT_SAN,	/* the first URI, DNS or email subjectAltName */
};

/* The JWT signature algorithms accelnet verifies, one X-macro list (names as in RFC 7518). */
#define CONF_JWT_ALGS(X) X(HS256) X(RS256) X(ES256)
#define CONF_JWT_ALG_ENUM(name) CONF_JWT_##name,
enum conf_jwt_alg { CONF_JWT_ALGS(CONF_JWT_ALG_ENUM) CONF_JWT_NALGS };
#undef CONF_JWT_ALG_ENUM

/* routes[].auth.jwt: bearer tokens (guard/jwt.h). */
struct conf_jwt {
	char *keys_file;	 /* PEM public keys, or an HS256 secret; or: */
	char *jwks_file;	 /* a JWKS document (keys chosen by kid) */
	unsigned algorithms;	 /* bit (1 << conf_jwt_alg) each; 0: those the keys allow */
	char *audience, *issuer; /* NULL: not checked */
	char *tenant_claim;	 /* default "sub" */
	unsigned leeway_s;	 /* clock skew allowed on exp and nbf; default 30 */
};

/* routes[].auth.basic: HTTP Basic against hashed passwords (guard/basic.h). */
struct conf_basic {
	char *users_file; /* htpasswd "user:hash" lines */
};

/* routes[].auth: who may use the route (guard/auth.h); at least one method. */
struct conf_auth {
	char *api_keys_file;		   /* "TENANT KEY" lines (guard/apikeys.h); NULL: none */
	struct conf_jwt *jwt;		   /* NULL: no JWT */
	struct conf_basic *basic;	   /* NULL: no Basic */
	enum conf_cert_tenant client_cert; /* a verified client certificate names the tenant */
	char *identity_header; /* the authenticated tenant, to the backend; default X-Tenant */
	char **tenants;	       /* admitted tenants; none: every tenant with a key */
	size_t ntenants;
	unsigned pass_credentials; /* forward Authorization / X-API-Key (default: dropped) */
};

/* A rate: <n> requests per <per_s> seconds ("100/s", "600/m"); n 0: none. */
struct conf_rate {
	unsigned n, per_s;
};

/* routes[].rate_limit (guard/ratelimit.h). */
struct conf_rate_limit {
	struct conf_rate per_ip;     /* per client address (an IPv6 client's /64) */
	struct conf_rate per_tenant; /* per tenant: the authenticated one, else as queues see it */
	struct conf_rate per_route;  /* every client of the route together */
	unsigned burst;		     /* requests at once; 0: one second's worth */
	unsigned tokens_per_minute;  /* LLM tokens per tenant; 0: no token limit */
	unsigned token_burst;	     /* tokens at once; 0: tokens_per_minute / 6 (10 s worth) */
	unsigned default_max_tokens; /* reserved when a request names no max_tokens */
	unsigned concurrency;	     /* requests in flight per tenant; 0: no cap */
};

/* prices: a model's prices (policy/spend_math.h), by the exact name clients write. */
/* models: a model's tokenizer (tok/tokmodel.h), loaded when the config is read */
struct conf_tokmodel {
	char *name;
	char *tokenizer, *chat_template; /* paths; chat_template NULL: beside the tokenizer */
	char *chat_format;		 /* a format by name; NULL: known by the template */
	unsigned block_size;		 /* tokens per KV-cache block */
	struct tokmodel *tm;		 /* loaded; NULL only while the config is read */
};

struct conf_price {
	char *model;
	struct spend_price price; /* micro-units per million tokens */
};

/* routes[].budget: what each tenant may spend per window (guard/budget.h). */
struct conf_budget {
	uint64_t per_tenant;	     /* micro-units per window */
	uint64_t window_s;	     /* the window's length */
	unsigned default_max_tokens; /* reserved when a request names no max_tokens */
	unsigned tenants;	     /* the budget table's slots (guard/budget.h) */
};
#define CONF_BUDGET_TENANTS 16384	/* routes.budget.tenants' default ... */
#define CONF_BUDGET_TENANTS_MAX 1048576 /* ... and most */

enum conf_api {
	CONF_API_NONE,	 /* text/plain error bodies */
	CONF_API_OPENAI, /* {"error": {...}} JSON bodies, as the OpenAI API writes them */
};

/* routes[].cache: the response cache on this route (cache/fresh.h, docs/cache.md) */
struct conf_route_cache {
	unsigned on;		  /* the route's answers are cached */
	unsigned cookies;	  /* store responses with Set-Cookie */
	unsigned authorized;	  /* store answers to requests with Authorization (RFC 9111 3.5) */
	unsigned heuristic_pct;	  /* heuristic freshness: % of (Date - Last-Modified); 0: none */
	unsigned heuristic_max_s; /* ... at most */
	unsigned default_ttl_s;	  /* freshness of a response that gives none; 0: none */
	int64_t stale_while_revalidate_s; /* default when a response gives none; -1: none */
	int64_t stale_if_error_s;	  /* likewise */
	unsigned wait_ms;	  /* a coalesced request waits this long for the fill's head */
	unsigned pass_s;	  /* an unstorable answer sends the key's requests straight on */
	unsigned inference;	  /* POST JSON bodies (canonicalised) are keys: embeddings,
				     temperature 0 */
	unsigned any_temperature; /* ... and completions at any temperature too */
};

struct conf_route {
	char *name;			  /* routes[].name; NULL: its index names it in metrics */
	char *path_prefix;		  /* "/" when not given */
	char *host;			  /* exact, case-insensitive, port ignored; NULL: any */
	char *sni;			  /* TLS server name: exact or "*.domain"; NULL: any */
	char *method;			  /* exact; NULL: any */
	char *header_name, *header_value; /* value NULL: presence is enough */
	char *model;			  /* '*' '?' pattern on the body's "model"; NULL: any */
	size_t pool;			  /* index into conf.pools */
	unsigned priority;		  /* QD_LOW .. QD_HIGH */
	char *priority_header;		  /* NULL: the route's priority only */
	char *tenant_header;		  /* NULL: the client's address */
	int has_spill;			  /* spillover: a second pool */
	size_t spill_pool;		  /* ... used when the wait would exceed: */
	unsigned spill_after_ms;
	unsigned sse_heartbeat_ms;	    /* 0: no heartbeats */
	struct conf_auth *auth;		    /* NULL: anyone may use it */
	struct conf_rate_limit *rate_limit; /* NULL: no limit */
	struct conf_budget *budget;	    /* NULL: no budget */
	unsigned api;			    /* CONF_API_*: the shape of the proxy's own errors */
	unsigned access_log;		    /* 0: this route's requests are not logged */
	unsigned websocket; /* a WebSocket handshake becomes a tunnel (proxy/tunnel.h) */
	unsigned grpc_web;  /* gRPC-Web requests go to the backend as gRPC (proxy/up_h2.c) */
	struct conf_route_cache cache;
	struct conf_fwd *fwd; /* rewrite, request_headers, response_headers; NULL: none */
};

/* cache: the response cache's store (cache/store.h) */
struct conf_cache {
	unsigned on;		/* the section was given */
	uint64_t memory;	/* bytes, all shards */
	uint64_t max_object;	/* the largest body stored */
	unsigned shards;	/* a power of two */
	char *eviction;		/* a policy of policy/evict.h; NULL: sieve */
	char *tag_header;	/* purge by tag reads this response field; NULL: Cache-Tag */
	unsigned status_header; /* answers carry Cache-Status (RFC 9211) */
};

struct conf_timeouts {
	unsigned connect_ms, header_ms, idle_ms, first_byte_ms, between_bytes_ms, shutdown_ms;
	unsigned body_ms; /* the whole request body, from the end of the head; 0: no limit */
	unsigned send_ms; /* a client that takes no response bytes this long is cut; 0: never */
	unsigned tunnel_idle_ms;  /* a tunnel with no byte either way this long is closed */
	unsigned tunnel_drain_ms; /* draining: an open tunnel is closed this long after */
};

struct conf_limits {
	unsigned max_connections;
	unsigned max_header_bytes;
	uint64_t max_body_bytes;
	uint64_t body_buffer_bytes; /* a body is read this far before it may take a slot */
	unsigned min_body_rate;	    /* bytes/s a request body must average; 0: no minimum */
	unsigned max_uri_bytes;	    /* a longer request target gets 414; 0: only max_header_bytes */
	unsigned max_requests_per_connection; /* then the connection closes; 0: no cap */
	unsigned max_connections_per_ip;      /* more from one address are refused; 0: no cap */
	unsigned max_headers;		      /* more header fields get 431; <= CONF_MAX_HEADERS */
	struct conf_rate accept_rate_per_ip;  /* new connections per address; n 0: no limit */
	uint64_t max_buffer_memory; /* buffers lent, all workers; past it new clients are shed */
	unsigned path;		    /* enum conf_path: a request path not in normal form */
	unsigned max_tunnels;	    /* open WebSocket tunnels, all workers; more get 503 */
	unsigned h2_max_streams;    /* HTTP/2 streams open at once on one connection */
	uint64_t
	    h2_max_header_list;	   /* bytes of an HTTP/2 header list as decoded (RFC 9113 6.5.2) */
	uint64_t h2_stream_window; /* a stream's initial receive window (at most half a buffer) */
	uint64_t h2_conn_window;   /* an HTTP/2 connection's receive window */
	unsigned h2_max_resets;	   /* RST_STREAMs a second from one client connection; 0: no cap */
	unsigned h2_max_control;   /* SETTINGS, PING, PRIORITY, empty DATA a second; 0: no cap */
};

/* limits.path: what a request path not in its normal form (http/target.h) gets */
enum conf_path {
	CONF_PATH_NORMALIZE, /* rewritten to it, then routed, cached, logged and forwarded */
	CONF_PATH_REFUSE,    /* 400 */
};

/* tune: how the proxy moves bytes, not what it does with them */
struct conf_tune {
	unsigned splice; /* bodies no feature reads go by splice(2) (proxy/splice_body.h) */
	unsigned io;	 /* the event loops' back end: enum loop_backend_choice (core/loop.h) */
};

/* access_log: one line per request (obs/accesslog.h) */
struct conf_access_log {
	char *path;	     /* a file, "stderr" or "syslog"; NULL: no access log */
	char *syslog_socket; /* path: syslog: the daemon's unix socket; NULL: /dev/log */
	unsigned format;     /* enum alog_format: 0 JSON lines, 1 combined */
	double sample;	     /* the share of requests logged, 0..1 */
};

/* metrics: what the registry keeps (obs/metrics.h) */
/* probes: the proxy's own GET /healthz and /readyz (control/admin.h, proxy/stages.c) */
struct conf_probes {
	unsigned min_up;    /* /readyz wants this many backends up in every pool */
	unsigned listeners; /* the data listeners answer them too, before any route */
};

struct conf_metrics {
	unsigned max_tenants; /* tenants with series of their own; the rest are "other" */
};

/* cluster: limits shared with other instances through Redis (control/cluster.h) */
struct conf_cluster {
	char *redis;	     /* "HOST:PORT" as written; NULL: no cluster */
	char *host;	     /* ... its host (a name or an IP literal, no brackets) */
	unsigned port;	     /* ... and port */
	unsigned sync_ms;    /* how often counts go to Redis and come back */
	unsigned timeout_ms; /* a connect or a sync's replies waited for this long at most */
	char *key_prefix;    /* every Redis key starts with it; NULL: "accelnet:" */
	char *password_file; /* AUTH with the password it holds; NULL: none */
	/* live instances believed at most (Redis may count more) */
	unsigned max_instances;
};

struct conf {
	char *file;	    /* for messages */
	unsigned workers;   /* >= 1 */
	char *user, *group; /* after binding, run as this user (and group); NULL: stay as started */
	struct conf_listen *listens;
	size_t nlistens;
	int has_admin;
	struct conf_listen admin;
	char *admin_token_file; /* admin.token_file: its requests need this bearer token */
	char *admin_state_file; /* admin.state_file: runtime changes kept here; NULL: none */
	/* admin.backend_networks: where the admin API may add backends; none: anywhere */
	struct net_cidr *admin_backend_networks;
	size_t nadmin_backend_networks;
	struct conf_timeouts timeouts;
	struct conf_limits limits;
	struct conf_tune tune;
	struct net_cidr *trusted_proxies; /* whose forwarding headers are believed */
	size_t ntrusted_proxies;
	struct conf_pool *pools;
	size_t npools;
	struct conf_route *routes;
	size_t nroutes;
	struct conf_access_log access_log;
	struct conf_metrics metrics;
	struct conf_probes probes;
	struct conf_cache cache;
	struct conf_cluster cluster;
	struct conf_price *prices; /* prices:, in the order given */
	size_t nprices;
	struct conf_tokmodel *tokmodels; /* models:, in the order given */
	size_t ntokmodels;
	/* discovery: how names of backends with discover are resolved (control/discover.h) */
	struct {
		char *resolvers; /* "IP:PORT,..." as c-ares takes it; NULL: the system's */
		unsigned min_ttl_ms, max_ttl_ms; /* a record's TTL is held within these */
		unsigned timeout_ms;		 /* one query's wait for an answer */
	} discovery;
	/* names of fields only the proxy sets, each once (CONF_GUARDED_FIELDS_MAX) */
	const char *guarded_fields[CONF_GUARDED_FIELDS_MAX];
	size_t nguarded_fields;
	int model_routes; /* some route has match.model: a body may be read before routing */
	/* GET /v1/models on api: openai routes: the models of the backends of the pools those
	 * routes reach (their pool and spillover pool), sorted, each once; n 0: none listed */
	struct {
		char *json;	    /* {"object":"list","data":[...]}, built once */
		size_t len;	    /* ... its length */
		const char **names; /* sorted; each points into a backend's models */
		uint32_t (*obj)[2]; /* names[i]'s object inside json: offset, length */
		size_t n;
	} models;
};

#define CONF_MODELS_JSON_MAX 15360 /* the list fits one reply buffer (16 KiB at least) */

/* "FILE:LINE:COL: message", ready to print. */
struct conf_error {
	char msg[1024];
};

#endif
