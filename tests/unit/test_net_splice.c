/*
 * test_net_splice.c - pipes and splice(2) between two connections (net/splice.h): bytes go
 * from one socket through the pipe to another whole and in order, the pipe's count of what
 * it holds follows them, a read stops at the room asked for, the source's end reads 0 and
 * a drained one -EAGAIN; spares are reused when empty, closed when not, and no more are
 * lent than the cap; a TLS connection may not be spliced.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "net/splice.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Two non-blocking stream socket pairs: src[0] writes to src[1] (spliced from), dst[0]
 * (spliced to) to dst[1]. */
static void pairs(int src[2], int dst[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, src), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, dst), 0);
}

static void bytes_go_through_whole(void **state)
{
	(void)state;
	int src[2], dst[2];
	pairs(src, dst);
	struct net_conn from, to;
	net_conn_init(&from, src[1]);
	net_conn_init(&to, dst[0]);
	assert_true(net_splice_able(&from, &to));
	struct net_pipe p;
	assert_int_equal(net_pipe_open(&p, 128 << 10), 0);
	assert_true(p.size >= 65536);
	assert_int_equal(net_splice_in(&p, &from, 100), -EAGAIN); /* nothing there */
	char msg[3000];
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (char)(i * 7);
	assert_int_equal(write(src[0], msg, sizeof(msg)), sizeof(msg));
	assert_int_equal(net_splice_in(&p, &from, 1000), 1000); /* no more than asked */
	assert_int_equal(p.held, 1000);
	ssize_t n = net_splice_in(&p, &from, sizeof(msg));
	assert_int_equal(n, sizeof(msg) - 1000);
	assert_int_equal(p.held, sizeof(msg));
	assert_int_equal(net_splice_out(&p, &to), sizeof(msg));
	assert_int_equal(p.held, 0);
	char got[sizeof(msg)];
	assert_int_equal(read(dst[1], got, sizeof(got)), sizeof(got));
	assert_memory_equal(got, msg, sizeof(msg));
	close(src[0]); /* the source's end */
	assert_int_equal(net_splice_in(&p, &from, 100), 0);
	/* the destination gone: -EPIPE, never a signal while SIGPIPE is ignored (the proxy's
	 * signals.c ignores it) */
	signal(SIGPIPE, SIG_IGN);
	close(dst[1]);
	assert_int_equal(write(p.wr, "x", 1), 1);
	p.held = 1;
	assert_int_equal(net_splice_out(&p, &to), -EPIPE);
	net_pipe_close(&p);
	net_pipe_close(&p); /* safe twice */
	close(src[1]);
	close(dst[0]);
}

static void spares_reused_when_empty(void **state)
{
	(void)state;
	struct net_pipe_spares s;
	memset(&s, 0, sizeof(s));
	struct net_pipe a, b, c;
	assert_int_equal(net_pipe_take(&s, &a, 65536, 2), 0);
	assert_int_equal(net_pipe_take(&s, &b, 65536, 2), 0);
	assert_int_equal(net_pipe_take(&s, &c, 65536, 2), -EBUSY); /* the cap */
	assert_int_equal(s.lent, 2);
	int a_rd = a.rd;
	net_pipe_give(&s, &a); /* empty: kept */
	assert_int_equal(a.rd, -1);
	assert_int_equal(s.n, 1);
	assert_int_equal(write(b.wr, "left", 4), 4);
	b.held = 4;
	int b_rd = b.rd;
	net_pipe_give(&s, &b); /* bytes in it: closed */
	assert_int_equal(s.n, 1);
	assert_int_equal(s.lent, 0);
	assert_int_equal(fcntl(b_rd, F_GETFD), -1);
	assert_int_equal(net_pipe_take(&s, &c, 65536, 2), 0); /* the spare again */
	assert_int_equal(c.rd, a_rd);
	assert_int_equal(c.held, 0);
	net_pipe_give(&s, &c);
	net_pipe_spares_drain(&s);
	assert_int_equal(s.n, 0);
	assert_int_equal(fcntl(a_rd, F_GETFD), -1);
}

static void tls_is_not_spliced(void **state)
{
	(void)state;
	struct net_conn a, b;
	net_conn_init(&a, 5);
	net_conn_init(&b, 6);
	assert_true(net_splice_able(&a, &b));
	b.ssl = (struct ssl_st *)&b; /* any session */
	assert_false(net_splice_able(&a, &b));
	assert_false(net_splice_able(&b, &a));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(bytes_go_through_whole),
	    cmocka_unit_test(spares_reused_when_empty),
	    cmocka_unit_test(tls_is_not_spliced),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
