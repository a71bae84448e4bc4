/*
 * test_xfer_api.c - the public API of include/accelnet/xfer.h as another program uses it: a
 * receiver (xfer_serve) on a thread, a memory buffer and a file sent with xfer_send, the
 * report's figures, and the zero-copy accounting of the buffer (MSG_ZEROCOPY; on loopback the
 * kernel copies anyway, and the report must say so rather than claim zero copy); and a streamed
 * send (xfer_send_begin/add/end) whose first file is in place on the receiver while the caller
 * is still listing, with progress that says the total is not known yet.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accelnet/xfer.h"

static volatile int stop;
static int port;
static char dir[64] = "/tmp/accelnet-xfer-api-XXXXXX";

static void ready(const int *ports, unsigned n, void *arg)
{
	(void)n;
	(void)arg;
	__atomic_store_n(&port, ports[0], __ATOMIC_RELEASE);
}

static char listen_addr[64];

static void *serve_main(void *arg)
{
	(void)arg;
	struct xfer_serve_opts o = {
	    .listen = listen_addr, .dir = dir, .insecure = 1, .stop = &stop, .ready = ready};
	int rc = xfer_serve(&o);
	__atomic_store_n(&port, -1, __ATOMIC_RELEASE); /* ended: never leave the test waiting */
	return (void *)(intptr_t)rc;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(*len + 1);
	if (fread(b, 1, *len, f) != *len) {
		free(b);
		b = NULL;
	}
	fclose(f);
	return b;
}

static void buffer_and_file(void **state)
{
	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(listen_addr, sizeof(listen_addr), "127.0.0.1:%d", free_port());
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, serve_main, NULL), 0);
	while (!__atomic_load_n(&port, __ATOMIC_ACQUIRE))
		usleep(1000);
	assert_true(port > 0);
	char remote[64];
	snprintf(remote, sizeof(remote), "127.0.0.1:%d", port);

	size_t len = (3u << 20) + 12345;
	uint8_t *buf = malloc(len);
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	char src[128];
	snprintf(src, sizeof(src), "%s-src.txt", dir);
	FILE *f = fopen(src, "w");
	fputs("a file next to the buffer\n", f);
	fclose(f);

	struct xfer_item items[2] = {
	    {.name = "kv/cache.bin", .buf = buf, .len = len},
	    {.name = "notes.txt", .path = src},
	};
	struct xfer_send_opts o = {.remote = remote, .streams = 2, .chunk_kib = 256};
	struct xfer_report r;
	assert_int_equal(xfer_send(&o, items, 2, &r), 0);
	assert_string_equal(r.error, "");
	assert_int_equal(r.files, 2);
	assert_int_equal(r.bytes_total, len + 26);
	assert_int_equal(r.bytes_acked, len + 26);
	assert_int_equal(r.nlinks, 1);
	/* the buffer went zero-copy (or plainly when SO_ZEROCOPY is off); either way the report
	 * never claims more than was sent, and says how much the kernel copied */
	assert_true(r.zc_copied_bytes <= r.zc_bytes);
	assert_true(r.zc_bytes <= r.bytes_sent);
	printf("zero-copy bytes %llu, copied by the kernel anyway %llu\n",
	       (unsigned long long)r.zc_bytes, (unsigned long long)r.zc_copied_bytes);

	char path[160];
	size_t got;
	snprintf(path, sizeof(path), "%s/kv/cache.bin", dir);
	uint8_t *back = read_file(path, &got);
	assert_non_null(back);
	assert_int_equal(got, len);
	assert_memory_equal(back, buf, len);
	free(back);
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	back = read_file(path, &got);
	assert_non_null(back);
	assert_int_equal(got, 26);
	free(back);

	/* the same buffer again: the receiver has it, nothing is sent */
	assert_int_equal(xfer_send(&o, items, 1, &r), 0);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	void *ret;
	pthread_join(th, &ret);
	assert_int_equal((intptr_t)ret, 0);
	free(buf);
	unlink(src);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void refused_without_receiver(void **state)
{
	(void)state;
	uint8_t b[10] = {0};
	struct xfer_item it = {.name = "x", .buf = b, .len = sizeof(b)};
	struct xfer_send_opts o = {.remote = "127.0.0.1:1", .stall_ms = 500};
	struct xfer_report r;
	assert_true(xfer_send(&o, &it, 1, &r) < 0);
	assert_non_null(strstr(r.error, "cannot reach the receiver"));
	o.remote = "not an address";
	assert_int_equal(xfer_send(&o, &it, 1, &r), -EINVAL);
	assert_non_null(strstr(r.error, "bad address"));
	struct xfer_item bad = {.name = "../x", .buf = b, .len = sizeof(b)};
	o.remote = "127.0.0.1:1";
	assert_int_equal(xfer_send(&o, &bad, 1, &r), -EINVAL);
	assert_non_null(strstr(r.error, ".."));
}

struct seen {
	int listing_reports; /* progress reports while files were still being listed */
	uint32_t listed;     /* the files those reports said were listed, at most */
};

static void on_progress(const struct xfer_report *r, void *arg)
{
	struct seen *seen = arg;
	if (r->listing) {
		seen->listing_reports++;
		seen->listed = r->files > seen->listed ? r->files : seen->listed;
	}
}

/*
 * The caller lists 100 files, then stops listing until the first one is in place on the
 * receiver: a sender that sent nothing before the listing ended would wait here for ever (the
 * deadline fails the test). Then the rest, and every file byte for byte. With one stream, the
 * connection that carries the parts carries the chunks too.
 */
static void streamed_until_first_in_place(unsigned streams)
{
	snprintf(dir, sizeof(dir), "/tmp/accelnet-xfer-stream-XXXXXX");
	assert_non_null(mkdtemp(dir));
	__atomic_store_n(&stop, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&port, 0, __ATOMIC_RELAXED);
	snprintf(listen_addr, sizeof(listen_addr), "127.0.0.1:%d", free_port());
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, serve_main, NULL), 0);
	while (!__atomic_load_n(&port, __ATOMIC_ACQUIRE))
		usleep(1000);
	assert_true(port > 0);
	char remote[64];
	snprintf(remote, sizeof(remote), "127.0.0.1:%d", port);

	enum { N = 300, EACH = 1500 };
	uint8_t *buf = malloc((size_t)N * EACH);
	for (size_t i = 0; i < (size_t)N * EACH; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 11);
	struct seen seen = {0};
	struct xfer_send_opts o = {.remote = remote,
				   .streams = streams,
				   .progress = on_progress,
				   .arg = &seen,
				   .progress_ms = 1};
	struct xfer_sending *x;
	struct xfer_report r;
	memset(&r, 0, sizeof(r));
	assert_int_equal(xfer_send_begin(&o, &x), 0);
	char names[N][32];
	for (int i = 0; i < N; i++)
		snprintf(names[i], sizeof(names[i]), "s/d%d/f%03d", i / 100, i);
	for (int i = 0; i < 100; i++) {
		struct xfer_item it = {
		    .name = names[i], .buf = buf + (size_t)i * EACH, .len = EACH};
		assert_int_equal(xfer_send_add(x, &it, &r), 0);
	}
	char first[160];
	struct stat st;
	snprintf(first, sizeof(first), "%s/s/d0/f000", dir);
	for (int waited = 0; stat(first, &st) < 0 && waited < 20000; waited++)
		usleep(1000);		       /* a readiness check with a deadline: 20 s */
	assert_int_equal(stat(first, &st), 0); /* in place while the listing goes on */
	assert_int_equal(st.st_size, EACH);
	assert_true(seen.listing_reports > 0); /* and the progress said: total not known yet */
	assert_true(seen.listed >= 64 && seen.listed <= 100);
	for (int i = 100; i < N; i++) {
		struct xfer_item it = {
		    .name = names[i], .buf = buf + (size_t)i * EACH, .len = EACH};
		assert_int_equal(xfer_send_add(x, &it, &r), 0);
	}
	assert_int_equal(xfer_send_end(x, &r), 0);
	assert_string_equal(r.error, "");
	assert_int_equal(r.listing, 0);
	assert_int_equal(r.files, N);
	assert_int_equal(r.bytes_total, (uint64_t)N * EACH);
	for (int i = 0; i < N; i++) {
		char path[160];
		size_t got;
		snprintf(path, sizeof(path), "%s/%.31s", dir, names[i]);
		uint8_t *back = read_file(path, &got);
		assert_non_null(back);
		assert_int_equal(got, EACH);
		assert_memory_equal(back, buf + (size_t)i * EACH, EACH);
		free(back);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	void *ret;
	pthread_join(th, &ret);
	assert_int_equal((intptr_t)ret, 0);
	free(buf);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void streamed_data_before_listing_ends(void **state)
{
	(void)state;
	streamed_until_first_in_place(2);
}

static void streamed_on_one_stream(void **state)
{
	(void)state;
	streamed_until_first_in_place(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(buffer_and_file),
	    cmocka_unit_test(refused_without_receiver),
	    cmocka_unit_test(streamed_data_before_listing_ends),
	    cmocka_unit_test(streamed_on_one_stream),
	};
	return cmocka_run_group_tests_name("xfer API", tests, NULL, NULL);
}
