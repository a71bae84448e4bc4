/*
 * test_net_sni.c - the ClientHello reader (net/sni.h) on hellos built here field by field:
 * the name found (with other extensions before it, with none), no name, every truncation
 * "not enough yet", and hostile ones refused: another record or handshake type, lengths past
 * what holds them (the hello's, the session id's, the extensions', the name list's), a hello
 * split over two records, two server_name extensions, an empty, overlong or odd-byte name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "net/sni.h"

#include <errno.h>
#include <string.h>

struct msg {
	uint8_t b[NET_SNI_RECORD_MAX + 64];
	size_t n;
};

static void put(struct msg *m, const void *p, size_t n)
{
	memcpy(m->b + m->n, p, n);
	m->n += n;
}

static void put16(struct msg *m, size_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	put(m, b, 2);
}

/* One server_name extension naming <name> (length <nlen>). */
static void sni_ext(struct msg *m, const char *name, size_t nlen)
{
	put16(m, 0);
	put16(m, nlen + 5);
	put16(m, nlen + 3);
	put(m, "\0", 1);
	put16(m, nlen);
	put(m, name, nlen);
}

/* A record holding a ClientHello whose extensions are <ext> (NULL: no extensions field). */
static void hello(struct msg *out, const struct msg *ext)
{
	struct msg h = {.n = 0};
	put16(&h, 0x0303);
	for (int i = 0; i < 32; i++)
		put(&h, "r", 1);
	put(&h, "\x20", 1); /* a 32-byte session id */
	for (int i = 0; i < 32; i++)
		put(&h, "s", 1);
	put16(&h, 4);
	put(&h, "\x13\x01\x13\x02", 4);
	put(&h, "\x01\x00", 2);
	if (ext) {
		put16(&h, ext->n);
		put(&h, ext->b, ext->n);
	}
	out->n = 0;
	put(out, "\x16\x03\x01", 3);
	put16(out, h.n + 4);
	put(out, "\x01\x00", 2);
	put16(out, h.n);
	put(out, h.b, h.n);
}

static int parse(const struct msg *m, const char **name, size_t *n)
{
	return net_sni_parse(m->b, m->n, name, n);
}

static void finds_the_name(void **state)
{
	(void)state;
	static struct msg ext, m;
	const char *name;
	size_t n;
	ext.n = 0;
	put16(&ext, 0x002b); /* supported_versions first */
	put16(&ext, 3);
	put(&ext, "\x02\x03\x04", 3);
	sni_ext(&ext, "Api.Example.com", 15);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), 1);
	assert_int_equal(n, 15);
	assert_memory_equal(name, "Api.Example.com", 15);
	/* every cut short of the record: not enough yet */
	for (size_t cut = 0; cut < m.n; cut++)
		assert_int_equal(net_sni_parse(m.b, cut, &name, &n), -EAGAIN);
	/* no extensions, or none that names a server: 0 */
	hello(&m, NULL);
	assert_int_equal(parse(&m, &name, &n), 0);
	ext.n = 0;
	put16(&ext, 0x002b);
	put16(&ext, 0);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), 0);
}

static void hostile_refused(void **state)
{
	(void)state;
	static struct msg ext, m;
	const char *name;
	size_t n;
	char big[300];
	memset(big, 'a', sizeof(big));
	/* not a handshake record; not TLS; not a ClientHello */
	hello(&m, NULL);
	m.b[0] = 0x17;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	assert_int_equal(net_sni_parse((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &name, &n),
			 -EINVAL);
	hello(&m, NULL);
	m.b[5] = 0x02;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* a record longer than TLS allows */
	hello(&m, NULL);
	m.b[3] = 0x40, m.b[4] = 0x01;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* the hello longer than its record: split over records, refused */
	hello(&m, NULL);
	m.b[7] = 0x7f;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* a session id past 32 bytes */
	hello(&m, NULL);
	m.b[5 + 4 + 34] = 33;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* extensions' length past the hello */
	ext.n = 0;
	sni_ext(&ext, "a.example", 9);
	hello(&m, &ext);
	size_t at = m.n - ext.n - 2;
	m.b[at] = 0x7f;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* a name's length past its list */
	hello(&m, &ext);
	m.b[m.n - 9 - 1] = 0x40;
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* two server_name extensions */
	ext.n = 0;
	sni_ext(&ext, "a.example", 9);
	sni_ext(&ext, "b.example", 9);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	/* an empty name, one of 256 bytes, one with a NUL, a space or a slash */
	const char *odd[] = {"a\0b", "a b", "a/b", "a\xffq"};
	ext.n = 0;
	sni_ext(&ext, "", 0);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	ext.n = 0;
	sni_ext(&ext, big, 256);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
	ext.n = 0;
	sni_ext(&ext, big, 255);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), 1);
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		ext.n = 0;
		sni_ext(&ext, odd[i], 3);
		hello(&m, &ext);
		assert_int_equal(parse(&m, &name, &n), -EINVAL);
	}
	/* an extension's length past the list */
	ext.n = 0;
	put16(&ext, 0x002b);
	put16(&ext, 9);
	put(&ext, "\x02", 1);
	hello(&m, &ext);
	assert_int_equal(parse(&m, &name, &n), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(finds_the_name),
	    cmocka_unit_test(hostile_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
