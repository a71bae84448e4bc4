/*
 * test_classify.c - the client address as the queue's tenant and the hash key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "proxy/classify.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static uint64_t key6(const char *text)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6};
	assert_int_equal(inet_pton(AF_INET6, text, &a.sin6_addr), 1);
	return classify_client_key((const struct sockaddr *)&a);
}

static uint64_t key4(const char *text)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	assert_int_equal(inet_pton(AF_INET, text, &a.sin_addr), 1);
	return classify_client_key((const struct sockaddr *)&a);
}

static void ipv6_clients_are_their_64(void **state)
{
	(void)state;
	/* one host rotating addresses inside its /64 stays one tenant */
	assert_true(key6("2001:db8:1:2::1") == key6("2001:db8:1:2:ffff:ffff:ffff:ffff"));
	assert_true(key6("2001:db8:1:2::1") != key6("2001:db8:1:3::1"));
	/* an IPv4 client is the same tenant over either family */
	assert_true(key6("::ffff:192.0.2.7") == key4("192.0.2.7"));
	assert_true(key4("192.0.2.7") != key4("192.0.2.8"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(ipv6_clients_are_their_64),
	};
	return cmocka_run_group_tests_name("classify", tests, NULL, NULL);
}
