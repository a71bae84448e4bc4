/*
 * adminc.c - the admin endpoint's client (see adminc.h).
 */
#include "cli/adminc.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void adminc_from_env(const char **admin, const char **token_file)
{
	if (!*admin || !**admin)
		*admin = getenv("ACCELNET_ADMIN");
	if (!*admin || !**admin)
		*admin = ADMINC_DEFAULT_ADDR;
	if (!*token_file || !**token_file)
		*token_file = getenv("ACCELNET_ADMIN_TOKEN_FILE");
	if (*token_file && !**token_file)
		*token_file = NULL;
}

int adminc_parse_addr(struct adminc *a, const char *addr)
{
	const char *colon = strrchr(addr, ':');
	const char *h = addr;
	size_t hl;
	if (!colon || !colon[1] || strlen(colon + 1) >= sizeof(a->port))
		return -EINVAL;
	hl = (size_t)(colon - addr);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (!hl || hl >= sizeof(a->host))
		return -EINVAL;
	memcpy(a->host, h, hl);
	a->host[hl] = 0;
	strcpy(a->port, colon + 1);
	for (const char *p = a->port; *p; p++)
		if (*p < '0' || *p > '9')
			return -EINVAL;
	return 0;
}

int adminc_load_token(struct adminc *a, const char *path)
{
	FILE *f = fopen(path, "r");
	size_t n;
	if (!f) {
		snprintf(a->err, sizeof(a->err), "--token-file %s: %s", path, strerror(errno));
		return -1;
	}
	n = fread(a->token, 1, sizeof(a->token) - 1, f);
	a->token[n] = 0;
	int more = fgetc(f) != EOF;
	fclose(f);
	if (n && a->token[n - 1] == '\n')
		a->token[--n] = 0;
	int bad = more || !n;
	for (size_t i = 0; i < n; i++)
		bad |= a->token[i] <= ' ' || a->token[i] > '~';
	if (bad) {
		explicit_bzero(a->token, sizeof(a->token));
		snprintf(a->err, sizeof(a->err),
			 "--token-file %s: expected one line of 1 to %d printable characters", path,
			 ADMINC_TOKEN_MAX);
		return -1;
	}
	return 0;
}

void adminc_wipe(struct adminc *a)
{
	explicit_bzero(a->token, sizeof(a->token));
}

static int wait_fd(int fd, short ev)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int rc = poll(&p, 1, ADMINC_IO_TIMEOUT_MS);
	return rc > 0 ? 0 : rc == 0 ? -ETIMEDOUT : -errno;
}

static int adminc_connect(struct adminc *a)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int fd = -1, rc = getaddrinfo(a->host, a->port, &hints, &ai);
	if (rc) {
		snprintf(a->err, sizeof(a->err), "cannot resolve %s: %s", a->host,
			 gai_strerror(rc));
		return -1;
	}
	rc = -ECONNREFUSED;
	for (struct addrinfo *i = ai; i && fd < 0; i = i->ai_next) {
		fd = socket(i->ai_family, i->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		if (connect(fd, i->ai_addr, i->ai_addrlen) < 0 && errno != EINPROGRESS)
			rc = -errno;
		else if ((rc = wait_fd(fd, POLLOUT)) == 0) {
			int e = 0;
			socklen_t el = sizeof(e);
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
			rc = -e;
		}
		if (rc) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0)
		snprintf(a->err, sizeof(a->err), "cannot reach the admin endpoint %s:%s: %s",
			 a->host, a->port, strerror(-rc));
	return fd;
}

static int send_all(struct adminc *a, int fd, const char *p, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t w = send(fd, p + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT) == 0)
			continue;
		if (w <= 0) {
			snprintf(a->err, sizeof(a->err), "admin endpoint %s:%s: send: %s", a->host,
				 a->port, strerror(errno));
			return -1;
		}
		off += (size_t)w;
	}
	return 0;
}

/* The whole answer, to the end of the connection, into *buf (NUL-terminated). */
static int recv_all(struct adminc *a, int fd, char **buf, size_t *len)
{
	size_t cap = 0;
	*len = 0;
	for (;;) {
		if (*len == cap) {
			if (cap >= ADMINC_BODY_MAX) {
				snprintf(a->err, sizeof(a->err),
					 "admin endpoint %s:%s: answer larger than %u MiB", a->host,
					 a->port, ADMINC_BODY_MAX >> 20);
				return -1;
			}
			cap = cap ? cap * 2 : 65536;
			char *nb = realloc(*buf, cap + 1);
			if (!nb) {
				snprintf(a->err, sizeof(a->err), "out of memory");
				return -1;
			}
			*buf = nb;
		}
		ssize_t r = recv(fd, *buf + *len, cap - *len, 0);
		if (r > 0) {
			*len += (size_t)r;
			continue;
		}
		if (r == 0)
			break;
		int rc = errno == EAGAIN ? wait_fd(fd, POLLIN) : -errno;
		if (rc) {
			snprintf(a->err, sizeof(a->err), "admin endpoint %s:%s: read: %s", a->host,
				 a->port, strerror(-rc));
			return -1;
		}
	}
	if (!*buf) {
		snprintf(a->err, sizeof(a->err), "admin endpoint %s:%s closed without an answer",
			 a->host, a->port);
		return -1;
	}
	(*buf)[*len] = 0;
	return 0;
}

int adminc_call(struct adminc *a, const char *method, const char *target, const char *body,
		size_t blen, int *status, char **out, size_t *outlen)
{
	char req[1024];
	char *buf = NULL;
	size_t len = 0;
	int rc = -1, n;
	int fd = adminc_connect(a);
	*out = NULL;
	*outlen = 0;
	if (fd < 0)
		goto out;
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s%s",
		     method, target, a->host, a->token[0] ? "Authorization: Bearer " : "", a->token,
		     a->token[0] ? "\r\n" : "");
	if (n > 0 && (size_t)n < sizeof(req) && body)
		n += snprintf(req + n, sizeof(req) - (size_t)n,
			      "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
	if (n > 0 && (size_t)n < sizeof(req))
		n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
	if (n <= 0 || (size_t)n >= sizeof(req)) {
		snprintf(a->err, sizeof(a->err), "request target too long");
		goto out;
	}
	int sent =
	    send_all(a, fd, req, (size_t)n) == 0 && (!body || send_all(a, fd, body, blen) == 0);
	explicit_bzero(req, sizeof(req));
	if (!sent || recv_all(a, fd, &buf, &len) < 0)
		goto out;
	char *start = strstr(buf, "\r\n\r\n");
	if (sscanf(buf, "HTTP/1.%*1[01] %3d", status) != 1 || !start) {
		snprintf(a->err, sizeof(a->err), "admin endpoint %s:%s: not an HTTP answer",
			 a->host, a->port);
		goto out;
	}
	start += 4;
	*outlen = len - (size_t)(start - buf);
	memmove(buf, start, *outlen + 1);
	*out = buf;
	buf = NULL;
	rc = 0;
out:
	for (char *e = a->err; rc && *e; e++) /* a peer's bytes may be quoted */
		if (*e < ' ' || *e > '~')
			*e = '?';
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}
