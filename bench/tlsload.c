/*
 * tlsload.c - the HTTPS load generator of bench/tls.py: many non-blocking TLS connections
 * on one epoll loop, one thread.
 *
 *   tlsload --target H:P --mode keepalive|full|resume|idle --conns N --duration S [--path P]
 *
 *   keepalive  N connections, each sends a request, reads the whole response, sends the
 *              next: HTTPS requests per second over established connections.
 *   full       each request on a new connection with a full handshake: a TCP connect, the
 *              handshake, one request and response, close_notify and close (with SO_LINGER
 *              0, so no TIME_WAIT piles up on the client's ports).
 *   resume     as full, but each connection offers the session (TLS 1.3 ticket, or TLS 1.2
 *              session) its slot received last; `resumed` counts the handshakes the server
 *              accepted the offer for (SSL_session_reused), so a server that never resumes
 *              shows it.
 *   idle       N connections, each makes one request and then stays open, idle (bench/
 *              idlemem.py --tls: what an idle TLS client costs a server). Once every one has
 *              its answer (or failed: a failed one is not opened again), or --duration
 *              passed, prints {"ok", "errors", "closed"} and holds them until standard input
 *              ends; "closed" counts idle ones the server closed meanwhile. At most
 *              --opening (default 64) are being opened at a time, so a server's handshake
 *              timeout measures nothing of this client's queue (0: all at once).
 *
 * The client offers TLS 1.3 only, TLS_AES_128_GCM_SHA256 and X25519 (--suite, --groups
 * change that), and does not verify the certificate (the server's signature in the handshake
 * is still checked, as it always is). Prints one JSON object: requests, errors, seconds, the
 * handshakes done and resumed, the session tickets (or sessions) received, and the suite,
 * group and protocol the last handshake negotiated.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum mode { M_KEEPALIVE, M_FULL, M_RESUME, M_IDLE };
enum state { S_CONNECT, S_HANDSHAKE, S_SEND, S_RECV, S_IDLE, S_DEAD };

struct conn {
	int fd;
	SSL *ssl;
	enum state st;
	SSL_SESSION *sess;	/* the slot's latest session, offered by the next connection */
	size_t sent, got, want; /* request bytes sent; response bytes read and expected */
	char in[65536];
	size_t in_len;
};

static struct {
	enum mode mode;
	struct sockaddr_in addr;
	SSL_CTX *ctx;
	int ep;
	char req[512];
	size_t req_len;
	unsigned long long requests, errors, handshakes, resumed, tickets, closed;
	char suite[64], group[32], proto[16];
} g;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void conn_arm(struct conn *c, unsigned events, int op)
{
	struct epoll_event ev = {.events = events, .data.ptr = c};
	if (epoll_ctl(g.ep, op, c->fd, &ev) < 0) {
		perror("tlsload: epoll_ctl");
		exit(1);
	}
}

/* A new session from the server (TLS 1.3 tickets arrive after the handshake): keep it. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
	struct conn *c = SSL_get_app_data(ssl);
	g.tickets++;
	if (c->sess)
		SSL_SESSION_free(c->sess);
	c->sess = sess;
	return 1; /* we hold the reference */
}

static void conn_close(struct conn *c, int abort_tcp)
{
	if (c->ssl) {
		if (!abort_tcp)
			SSL_shutdown(c->ssl); /* our close_notify, not waiting for theirs */
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	if (c->fd >= 0) {
		struct linger l = {1, 0};
		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		close(c->fd);
		c->fd = -1;
	}
}

static void conn_open(struct conn *c)
{
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c->fd < 0) {
		perror("tlsload: socket");
		exit(1);
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->ssl = SSL_new(g.ctx);
	SSL_set_fd(c->ssl, c->fd);
	SSL_set_app_data(c->ssl, c);
	SSL_set_connect_state(c->ssl);
	SSL_set_tlsext_host_name(c->ssl, "bench.test");
	if (g.mode == M_RESUME && c->sess)
		SSL_set_session(c->ssl, c->sess);
	c->sent = c->got = c->want = c->in_len = 0;
	c->st = S_CONNECT;
	if (connect(c->fd, (struct sockaddr *)&g.addr, sizeof(g.addr)) < 0 &&
	    errno != EINPROGRESS) {
		g.errors++;
		c->st = S_HANDSHAKE; /* the handshake reports the failure */
	}
	conn_arm(c, EPOLLOUT | EPOLLIN, EPOLL_CTL_ADD);
}

static void conn_fail(struct conn *c)
{
	g.errors++;
	ERR_clear_error();
	conn_close(c, 1);
	if (g.mode == M_IDLE) {
		c->st = S_DEAD; /* counted, never opened again */
		return;
	}
	conn_open(c);
}

/* The response head is in: how long the whole response is, or 0 while it is not. */
static size_t response_length(struct conn *c)
{
	char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
	if (!end)
		return 0;
	size_t head = (size_t)(end - c->in) + 4;
	if (memcmp(c->in, "HTTP/1.1 200", 12) != 0)
		return (size_t)-1;
	char *cl = memmem(c->in, head, "\r\nContent-Length:", 17);
	if (!cl)
		cl = memmem(c->in, head, "\r\ncontent-length:", 17);
	if (!cl)
		return (size_t)-1;
	return head + strtoull(cl + 17, NULL, 10);
}

/* One step of a connection's life; returns when it must wait for the socket. */
static void conn_step(struct conn *c)
{
	for (;;) {
		int ret, err;
		size_t n;
		switch (c->st) {
		case S_CONNECT:
		case S_HANDSHAKE:
			c->st = S_HANDSHAKE;
			ret = SSL_do_handshake(c->ssl);
			if (ret == 1) {
				g.handshakes++;
				g.resumed += SSL_session_reused(c->ssl) == 1;
				snprintf(g.suite, sizeof(g.suite), "%s",
					 SSL_get_cipher_name(c->ssl));
				snprintf(g.proto, sizeof(g.proto), "%s", SSL_get_version(c->ssl));
				int grp = SSL_get_negotiated_group(c->ssl);
				const char *gn = grp ? OBJ_nid2sn(grp & ~TLSEXT_nid_unknown) : "";
				snprintf(g.group, sizeof(g.group), "%s", gn ? gn : "?");
				c->st = S_SEND;
				break;
			}
			goto wait;
		case S_SEND:
			ret = SSL_write_ex(c->ssl, g.req + c->sent, g.req_len - c->sent, &n);
			if (ret <= 0)
				goto wait;
			c->sent += n;
			if (c->sent == g.req_len)
				c->st = S_RECV;
			break;
		case S_IDLE:
		case S_DEAD:
			return; /* (the loop handles an idle one's wake-up) */
		case S_RECV:
			ret = SSL_read_ex(c->ssl, c->in + c->in_len, sizeof(c->in) - c->in_len, &n);
			if (ret <= 0)
				goto wait;
			c->got += n;
			if (!c->want) {
				c->in_len += n;
				c->want = response_length(c);
				if (c->want == (size_t)-1 ||
				    (!c->want && c->in_len == sizeof(c->in))) {
					conn_fail(c);
					return;
				}
			}
			if (!c->want || c->got < c->want)
				break;
			if (c->got > c->want) {
				conn_fail(c); /* we never pipeline: more is a broken server */
				return;
			}
			g.requests++;
			if (g.mode == M_IDLE) {
				c->st = S_IDLE; /* only a close or an error wakes it now */
				conn_arm(c, EPOLLIN, EPOLL_CTL_MOD);
				return;
			}
			if (g.mode == M_KEEPALIVE) {
				c->sent = c->got = c->want = c->in_len = 0;
				c->st = S_SEND;
				break;
			}
			conn_close(c, 0);
			conn_open(c);
			return;
		}
		continue;
	wait:
		err = SSL_get_error(c->ssl, ret);
		if (err == SSL_ERROR_WANT_READ) {
			conn_arm(c, EPOLLIN, EPOLL_CTL_MOD);
			return;
		}
		if (err == SSL_ERROR_WANT_WRITE) {
			conn_arm(c, EPOLLOUT, EPOLL_CTL_MOD);
			return;
		}
		conn_fail(c);
		return;
	}
}

/* Idle mode: open the next of <cs> while fewer than <opening> are being opened. */
static void idle_open_more(struct conn *cs, unsigned conns, unsigned opening, unsigned *opened)
{
	while (*opened < conns && *opened - (unsigned)(g.requests + g.errors) < opening)
		conn_open(&cs[(*opened)++]);
}

static void usage(void)
{
	fprintf(stderr, "usage: tlsload --target H:P --mode keepalive|full|resume|idle --conns N "
			"--duration S [--path P] [--suite S] [--groups G] [--opening N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *target = NULL, *path = "/small", *suite = "TLS_AES_128_GCM_SHA256";
	const char *groups = "X25519";
	unsigned conns = 16, opening = 64;
	double duration = 5;
	static const struct option opts[] = {
	    {"target", 1, 0, 't'},   {"mode", 1, 0, 'm'},    {"conns", 1, 0, 'c'},
	    {"duration", 1, 0, 'd'}, {"path", 1, 0, 'p'},    {"suite", 1, 0, 's'},
	    {"groups", 1, 0, 'g'},   {"opening", 1, 0, 'o'}, {0, 0, 0, 0},
	};
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (o) {
		case 't':
			target = optarg;
			break;
		case 'm':
			g.mode = !strcmp(optarg, "keepalive") ? M_KEEPALIVE
				 : !strcmp(optarg, "full")    ? M_FULL
				 : !strcmp(optarg, "resume")  ? M_RESUME
				 : !strcmp(optarg, "idle")    ? M_IDLE
							      : (usage(), M_FULL);
			break;
		case 'c':
			conns = (unsigned)atoi(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		case 'p':
			path = optarg;
			break;
		case 's':
			suite = optarg;
			break;
		case 'g':
			groups = optarg;
			break;
		case 'o':
			opening = (unsigned)atoi(optarg);
			break;
		default:
			usage();
		}
	}
	char host[64];
	const char *colon = target ? strrchr(target, ':') : NULL;
	if (!colon || conns == 0 || (size_t)(colon - target) >= sizeof(host))
		usage();
	if (!opening)
		opening = conns;
	memcpy(host, target, (size_t)(colon - target));
	host[colon - target] = 0;
	g.addr.sin_family = AF_INET;
	g.addr.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &g.addr.sin_addr) != 1)
		usage();
	g.req_len = (size_t)snprintf(
	    g.req, sizeof(g.req),
	    "GET %s HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: tlsload\r\n\r\n", path);
	signal(SIGPIPE, SIG_IGN);

	g.ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(g.ctx, TLS1_3_VERSION);
	if (SSL_CTX_set_ciphersuites(g.ctx, suite) != 1 ||
	    SSL_CTX_set1_groups_list(g.ctx, groups) != 1) {
		fprintf(stderr, "tlsload: bad --suite or --groups\n");
		return 2;
	}
	SSL_CTX_set_verify(g.ctx, SSL_VERIFY_NONE, NULL);
	SSL_CTX_set_read_ahead(g.ctx, 1); /* one read() per record: the client is the bottleneck */
	SSL_CTX_set_session_cache_mode(g.ctx,
				       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(g.ctx, on_new_session);

	g.ep = epoll_create1(0);
	struct conn *cs = calloc(conns, sizeof(*cs));
	if (!cs)
		return 1;
	unsigned opened = 0;
	for (unsigned i = 0; i < conns; i++)
		cs[i].fd = -1;
	if (g.mode == M_IDLE)
		idle_open_more(cs, conns, opening, &opened);
	else
		for (; opened < conns; opened++)
			conn_open(&cs[opened]);
	double t0 = now_s(), end = t0 + duration, t;
	struct epoll_event evs[256];
	while ((t = now_s()) < end) {
		if (g.mode == M_IDLE && g.requests + g.errors >= conns)
			break; /* every one answered or failed */
		int n = epoll_wait(g.ep, evs, 256, (int)((end - t) * 1000) + 1);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c->st == S_IDLE) { /* the server closed it (or sent something) */
				g.closed++;
				conn_close(c, 1);
				c->st = S_DEAD;
				continue;
			}
			if (c->st == S_CONNECT && (evs[i].events & (EPOLLERR | EPOLLHUP))) {
				conn_fail(c); /* refused */
				continue;
			}
			conn_step(c);
		}
		if (g.mode == M_IDLE)
			idle_open_more(cs, conns, opening, &opened);
	}
	t = now_s() - t0;
	if (g.mode == M_IDLE) {
		printf("{\"ok\":%llu,\"errors\":%llu,\"closed\":%llu,\"seconds\":%.3f}\n",
		       g.requests, g.errors, g.closed, t);
		fflush(stdout);
		char buf[256];
		while (read(0, buf, sizeof(buf)) > 0) /* held until standard input ends */
			;
		return 0;
	}
	printf("{\"requests\":%llu,\"errors\":%llu,\"seconds\":%.3f,\"rps\":%.1f,"
	       "\"handshakes\":%llu,\"resumed\":%llu,\"tickets\":%llu,\"suite\":\"%s\",\"group\":"
	       "\"%s\","
	       "\"protocol\":\"%s\"}\n",
	       g.requests, g.errors, t, (double)g.requests / t, g.handshakes, g.resumed, g.tickets,
	       g.suite, g.group, g.proto);
	return 0;
}
