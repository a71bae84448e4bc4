/*
 * test_net_proxyproto.c - the PROXY protocol header (net/proxyproto.h): v1's line and v2's
 * block for IPv4 and IPv6, byte for byte as the specification lays them out; an IPv4 client
 * mapped into IPv6 written as IPv4; ends of two families or none named UNKNOWN / LOCAL; an
 * unknown version or a short buffer refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "net/proxyproto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

static struct sockaddr_in in4(const char *ip, uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	return a;
}

static struct sockaddr_in6 in6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	assert_int_equal(inet_pton(AF_INET6, ip, &a.sin6_addr), 1);
	return a;
}

static void v1_lines(void **state)
{
	(void)state;
	char out[NET_PROXYPROTO_MAX];
	struct sockaddr_in s = in4("192.0.2.1", 56324), d = in4("198.51.100.7", 443);
	int n =
	    net_proxyproto_write(1, (struct sockaddr *)&s, (struct sockaddr *)&d, out, sizeof(out));
	const char *want = "PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	struct sockaddr_in6 s6 = in6("2001:db8::1", 1), d6 = in6("2001:db8::ffff", 65535);
	n = net_proxyproto_write(1, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out,
				 sizeof(out));
	want = "PROXY TCP6 2001:db8::1 2001:db8::ffff 1 65535\r\n";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	/* the longest line there is fits the bound */
	s6 = in6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 65535);
	d6 = in6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
	n = net_proxyproto_write(1, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out,
				 sizeof(out));
	assert_true(n > 0 && n <= NET_PROXYPROTO_MAX);
	/* a mapped IPv4 client and an IPv4 listener: TCP4 */
	s6 = in6("::ffff:10.1.2.3", 4000);
	n = net_proxyproto_write(1, (struct sockaddr *)&s6, (struct sockaddr *)&d, out,
				 sizeof(out));
	want = "PROXY TCP4 10.1.2.3 198.51.100.7 4000 443\r\n";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(out, want, (size_t)n);
	/* two families: UNKNOWN */
	s6 = in6("2001:db8::1", 1);
	n = net_proxyproto_write(1, (struct sockaddr *)&s6, (struct sockaddr *)&d, out,
				 sizeof(out));
	assert_int_equal(n, strlen("PROXY UNKNOWN\r\n"));
	assert_memory_equal(out, "PROXY UNKNOWN\r\n", (size_t)n);
}

static void v2_blocks(void **state)
{
	(void)state;
	char out[NET_PROXYPROTO_MAX];
	struct sockaddr_in s = in4("192.0.2.1", 0x1234), d = in4("198.51.100.7", 443);
	int n =
	    net_proxyproto_write(2, (struct sockaddr *)&s, (struct sockaddr *)&d, out, sizeof(out));
	static const unsigned char want4[] = {
	    0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, /* sig */
	    0x21, 0x11, 0x00, 0x0c,			 /* v2 PROXY, TCP over IPv4, 12 bytes */
	    192,  0,	2,    1,    198,  51,	100,  7, /* addresses */
	    0x12, 0x34, 0x01, 0xbb,			 /* ports */
	};
	assert_int_equal(n, sizeof(want4));
	assert_memory_equal(out, want4, sizeof(want4));
	struct sockaddr_in6 s6 = in6("2001:db8::1", 1), d6 = in6("2001:db8::2", 2);
	n = net_proxyproto_write(2, (struct sockaddr *)&s6, (struct sockaddr *)&d6, out,
				 sizeof(out));
	assert_int_equal(n, 16 + 36);
	assert_int_equal((unsigned char)out[13], 0x21); /* TCP over IPv6 */
	assert_int_equal((unsigned char)out[15], 36);
	assert_memory_equal(out + 16, &s6.sin6_addr, 16);
	assert_memory_equal(out + 32, &d6.sin6_addr, 16);
	assert_int_equal((unsigned char)out[49], 1);
	assert_int_equal((unsigned char)out[51], 2);
	/* two families: LOCAL, nothing after the length */
	n = net_proxyproto_write(2, (struct sockaddr *)&s6, (struct sockaddr *)&d, out,
				 sizeof(out));
	assert_int_equal(n, 16);
	assert_int_equal((unsigned char)out[12], 0x20);
	assert_int_equal(out[14] | out[15], 0);
}

static void refused(void **state)
{
	(void)state;
	char out[NET_PROXYPROTO_MAX];
	struct sockaddr_in s = in4("192.0.2.1", 1), d = in4("192.0.2.2", 2);
	assert_int_equal(
	    net_proxyproto_write(3, (struct sockaddr *)&s, (struct sockaddr *)&d, out, sizeof(out)),
	    -EINVAL);
	assert_int_equal(
	    net_proxyproto_write(2, (struct sockaddr *)&s, (struct sockaddr *)&d, out, 27),
	    -EINVAL);
	assert_int_equal(
	    net_proxyproto_write(1, (struct sockaddr *)&s, (struct sockaddr *)&d, out, 20),
	    -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(v1_lines),
	    cmocka_unit_test(v2_blocks),
	    cmocka_unit_test(refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
