/*
 * pd.c - the simulator's prefill and decode roles (see pd.h): the fields read from a request,
 * the block ids and their HMAC, the rooms and the question a decode sim asks about one.
 */
#include "sim/pd.h"
#include "net/addr.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Where the value of "key" starts (the first such key anywhere), or NULL; *rest the bytes left. */
static const char *find_value(const char *b, size_t len, const char *key, size_t *rest)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i + klen + 2 <= len; i++) {
		if (b[i] != '"' || memcmp(b + i + 1, key, klen) != 0 || b[i + 1 + klen] != '"')
			continue;
		size_t k = i + klen + 2;
		while (k < len && (b[k] == ' ' || b[k] == ':' || b[k] == '\t' || b[k] == '\n'))
			k++;
		*rest = len - k;
		return b + k;
	}
	return NULL;
}

static int read_u64(const char *v, size_t rest, uint64_t *out)
{
	size_t k = 0;
	uint64_t n = 0;
	while (k < rest && v[k] >= '0' && v[k] <= '9' && k < 20)
		n = n * 10 + (uint64_t)(v[k++] - '0');
	*out = n;
	return k ? (int)k : -1;
}

void sim_pd_read(const char *b, size_t len, struct sim_pd_req *r)
{
	size_t rest;
	const char *v;
	memset(r, 0, sizeof(*r));
	v = find_value(b, len, "do_remote_decode", &rest);
	r->remote_decode = v && rest >= 4 && memcmp(v, "true", 4) == 0;
	if ((v = find_value(b, len, "remote_block_ids", &rest)) && rest && v[0] == '[') {
		size_t k = 1;
		r->has_ids = 1;
		for (;;) {
			while (k < rest && (v[k] == ' ' || v[k] == ','))
				k++;
			if (k >= rest || v[k] == ']')
				break;
			uint64_t id;
			int d = read_u64(v + k, rest - k, &id);
			if (d < 0 || r->nids == SIM_PD_IDS_MAX || id > UINT32_MAX) {
				r->ids_bad = 1;
				break;
			}
			r->ids[r->nids++] = (uint32_t)id;
			k += (size_t)d;
		}
	}
	const char *h = find_value(b, len, "bootstrap_host", &rest);
	size_t hrest = rest;
	const char *p = find_value(b, len, "bootstrap_port", &rest);
	size_t prest = rest;
	const char *room = find_value(b, len, "bootstrap_room", &rest);
	uint64_t port;
	if (!h || !p || !room || hrest < 2 || h[0] != '"' || read_u64(p, prest, &port) < 0 ||
	    port > 65535 || read_u64(room, rest, &r->room) < 0)
		return;
	size_t k = 1;
	while (k < hrest && h[k] != '"' && k < SIM_PD_HOST)
		k++;
	if (k >= hrest || h[k] != '"')
		return;
	memcpy(r->host, h + 1, k - 1);
	r->host[k - 1] = 0;
	r->port = (unsigned)port;
	r->has_room = 1;
}

unsigned sim_pd_ids(const char *secret, const char *prompt, size_t plen, unsigned block_bytes,
		    uint32_t *ids)
{
	size_t n = block_bytes ? plen / block_bytes : 0;
	n = n < 1 ? 1 : n > SIM_PD_IDS_MAX ? SIM_PD_IDS_MAX : n;
	/* the prompt's MAC, then each id the MAC of that and its index */
	unsigned char m[EVP_MAX_MD_SIZE + 4], id[EVP_MAX_MD_SIZE];
	unsigned mlen = 0, idlen;
	int klen = (int)strlen(secret);
	memset(m, 0, sizeof(m));
	if (!HMAC(EVP_sha256(), secret, klen, (const unsigned char *)prompt, plen, m, &mlen))
		mlen = 32;
	for (size_t i = 0; i < n; i++) {
		uint32_t idx = (uint32_t)i;
		memcpy(m + mlen, &idx, 4);
		memset(id, 0, sizeof(id));
		(void)HMAC(EVP_sha256(), secret, klen, m, mlen + 4, id, &idlen);
		ids[i] =
		    ((uint32_t)id[0] << 24 | (uint32_t)id[1] << 16 | (uint32_t)id[2] << 8 | id[3]) &
		    0x7fffffffu;
	}
	return (unsigned)n;
}

size_t sim_pd_params(char *out, size_t cap, const char *engine, const char *host, unsigned port,
		     const uint32_t *ids, unsigned n)
{
	size_t used = 0;
	int k =
	    snprintf(out, cap,
		     ",\"kv_transfer_params\":{\"do_remote_prefill\":true,\"do_remote_decode\":"
		     "false,\"remote_engine_id\":\"%s\",\"remote_host\":\"%s\",\"remote_port\":%u,"
		     "\"tp_size\":1,\"remote_block_ids\":[",
		     engine, host, port);
	if (k < 0 || (size_t)k >= cap)
		return 0;
	used = (size_t)k;
	for (unsigned i = 0; i < n; i++) {
		k = snprintf(out + used, cap - used, "%s%u", i ? "," : "", ids[i]);
		if (k < 0 || (size_t)k >= cap - used)
			return 0;
		used += (size_t)k;
	}
	if (cap - used < 3)
		return 0;
	memcpy(out + used, "]}", 3);
	return used + 2;
}

void sim_pd_room_add(struct sim_pd_rooms *r, uint64_t room)
{
	r->room[r->next] = room;
	r->next = (r->next + 1) % SIM_PD_ROOMS;
	if (r->n < SIM_PD_ROOMS)
		r->n++;
}

int sim_pd_room_has(const struct sim_pd_rooms *r, uint64_t room)
{
	for (unsigned i = 0; i < r->n; i++)
		if (r->room[i] == room)
			return 1;
	return 0;
}

/* A blocking connect that a pending completion of the thread's io_uring (or a signal)
 * interrupted carries on in the kernel: wait for it. 0 or -1. */
static int ask_connect(int fd, const struct net_addr *a)
{
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0)
		return 0;
	if (errno != EINTR)
		return -1;
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int rc, err = 0;
	socklen_t len = sizeof(err);
	while ((rc = poll(&p, 1, 1000)) < 0 && errno == EINTR)
		;
	if (rc != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
		return -1;
	return 0;
}

static int ask_write(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int sim_pd_room_ask(const char *host, unsigned port, uint64_t room)
{
	char text[SIM_PD_HOST + 16], req[160], resp[64];
	struct net_addr a;
	const char *why;
	snprintf(text, sizeof(text), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
	if (net_addr_parse_numeric(text, &a, &why) < 0)
		return -1;
	int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int n = snprintf(req, sizeof(req),
			 "GET /bootstrap/%llu HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
			 (unsigned long long)room, text);
	int got = -1;
	ssize_t k = 0;
	if (ask_connect(fd, &a) == 0 && ask_write(fd, req, (size_t)n) == 0)
		while ((k = read(fd, resp, sizeof(resp) - 1)) < 0 && errno == EINTR)
			;
	close(fd);
	if (k >= 12) {
		resp[k] = 0;
		got = strncmp(resp + 9, "200", 3) == 0	 ? 1
		      : strncmp(resp + 9, "404", 3) == 0 ? 0
							 : -1;
	}
	return got;
}
