/*
 * sni.c - the ClientHello reader behind sni.h. A cursor over the record's body that every
 * read checks against the end first; nothing is copied or allocated.
 */
#include "net/sni.h"

#include <errno.h>

struct cur {
	const uint8_t *p, *end;
};

static int take(struct cur *c, size_t n, const uint8_t **out)
{
	if ((size_t)(c->end - c->p) < n)
		return -EINVAL;
	if (out)
		*out = c->p;
	c->p += n;
	return 0;
}

static int u8(struct cur *c, size_t *v)
{
	const uint8_t *b;
	if (take(c, 1, &b) < 0)
		return -EINVAL;
	*v = b[0];
	return 0;
}

static int u16(struct cur *c, size_t *v)
{
	const uint8_t *b;
	if (take(c, 2, &b) < 0)
		return -EINVAL;
	*v = (size_t)b[0] << 8 | b[1];
	return 0;
}

/* A cursor over the next <n> bytes of <c>, which moves past them. */
static int sub(struct cur *c, size_t n, struct cur *out)
{
	const uint8_t *b;
	if (take(c, n, &b) < 0)
		return -EINVAL;
	*out = (struct cur){b, b + n};
	return 0;
}

static int name_ok(const uint8_t *s, size_t n)
{
	if (!n || n > 255)
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
			return 0;
	}
	return 1;
}

/* The server_name extension's body: its list, and the first host_name in it. */
static int read_server_name(struct cur *ext, const char **name, size_t *namelen)
{
	size_t n, type;
	struct cur list;
	if (u16(ext, &n) < 0 || sub(ext, n, &list) < 0 || ext->p != ext->end)
		return -EINVAL;
	while (list.p < list.end) {
		struct cur one;
		if (u8(&list, &type) < 0 || u16(&list, &n) < 0 || sub(&list, n, &one) < 0)
			return -EINVAL;
		if (type != 0)
			continue; /* host_name is the only type defined */
		if (!name_ok(one.p, n))
			return -EINVAL;
		*name = (const char *)one.p;
		*namelen = n;
		return 1;
	}
	return -EINVAL; /* a server_name extension naming nothing */
}

int net_sni_parse(const uint8_t *buf, size_t len, const char **name, size_t *namelen)
{
	if ((len >= 1 && buf[0] != 0x16) || (len >= 2 && buf[1] != 0x03))
		return -EINVAL; /* no handshake record of TLS (or SSL 3) */
	if (len < 5)
		return -EAGAIN;
	size_t rlen = (size_t)buf[3] << 8 | buf[4];
	if (rlen < 4 || rlen > NET_SNI_RECORD_MAX - 5)
		return -EINVAL;
	if (len < 5 + rlen)
		return -EAGAIN;
	struct cur rec = {buf + 5, buf + 5 + rlen}, hello, skip, exts;
	const uint8_t *h;
	size_t n;
	if (take(&rec, 4, &h) < 0 || h[0] != 0x01)
		return -EINVAL; /* not a ClientHello */
	size_t hlen = (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
	if (sub(&rec, hlen, &hello) < 0)
		return -EINVAL;		    /* split over records, or a length past the record */
	if (take(&hello, 2 + 32, NULL) < 0) /* legacy_version, random */
		return -EINVAL;
	if (u8(&hello, &n) < 0 || n > 32 || sub(&hello, n, &skip) < 0) /* session id */
		return -EINVAL;
	if (u16(&hello, &n) < 0 || n < 2 || n % 2 || sub(&hello, n, &skip) < 0) /* ciphers */
		return -EINVAL;
	if (u8(&hello, &n) < 0 || n < 1 || sub(&hello, n, &skip) < 0) /* compression */
		return -EINVAL;
	if (hello.p == hello.end)
		return 0; /* no extensions at all */
	if (u16(&hello, &n) < 0 || sub(&hello, n, &exts) < 0 || hello.p != hello.end)
		return -EINVAL;
	int found = 0;
	while (exts.p < exts.end) {
		size_t type;
		struct cur ext;
		if (u16(&exts, &type) < 0 || u16(&exts, &n) < 0 || sub(&exts, n, &ext) < 0)
			return -EINVAL;
		if (type != 0)
			continue;
		if (found)
			return -EINVAL; /* a second server_name */
		int rc = read_server_name(&ext, name, namelen);
		if (rc < 0)
			return rc;
		found = 1;
	}
	return found;
}
