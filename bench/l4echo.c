/*
 * l4echo.c - the TCP echo of bench/l4.py: a server that echoes every byte, and a client that
 * keeps <conns> connections busy for <seconds>, each writing <block> bytes and reading them
 * back before the next write (so the bytes in flight are conns x block), and prints the bytes
 * echoed and the round trips done.
 *
 *   l4echo server PORT
 *   l4echo client PORT CONNS SECONDS BLOCK
 *
 * One thread per connection, blocking sockets: the load generator stays simple, and with a
 * few connections its cost is a copy per byte each way, far below the proxies' work.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static atomic_ullong echoed, trips;
static atomic_int stop;
static int port, block;

static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char *b = malloc(1 << 16);
	ssize_t n;
	while (b && (n = read(fd, b, 1 << 16)) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, b + off, (size_t)(n - off));
			if (w <= 0)
				goto out;
			off += w;
		}
out:
	free(b);
	close(fd);
	return NULL;
}

static int serve(void)
{
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1024) < 0) {
		perror("l4echo: listen");
		return 1;
	}
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		pthread_t t;
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
}

static void *client_conn(void *arg)
{
	(void)arg;
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	char *out = calloc(1, (size_t)block), *in = malloc((size_t)block);
	if (!out || !in || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("l4echo: connect");
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while (!atomic_load(&stop)) {
		for (ssize_t off = 0, w; off < block; off += w)
			if ((w = write(fd, out + off, (size_t)(block - off))) <= 0)
				goto out;
		for (ssize_t got = 0, r; got < block; got += r)
			if ((r = read(fd, in + got, (size_t)(block - got))) <= 0)
				goto out;
		atomic_fetch_add(&echoed, (unsigned long long)block);
		atomic_fetch_add(&trips, 1);
	}
out:
	close(fd);
	free(out);
	free(in);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "server") == 0) {
		port = atoi(argv[2]);
		return serve();
	}
	if (argc != 6 || strcmp(argv[1], "client") != 0) {
		fprintf(stderr,
			"usage: l4echo server PORT | l4echo client PORT CONNS SECONDS BLOCK\n");
		return 2;
	}
	port = atoi(argv[2]);
	int conns = atoi(argv[3]), secs = atoi(argv[4]);
	block = atoi(argv[5]);
	if (conns < 1 || conns > 4096 || secs < 1 || block < 1) {
		fprintf(stderr, "l4echo: bad arguments\n");
		return 2;
	}
	pthread_t *t = calloc((size_t)conns, sizeof(*t));
	for (int i = 0; i < conns; i++)
		pthread_create(&t[i], NULL, client_conn, NULL);
	struct timespec d = {.tv_sec = secs};
	nanosleep(&d, NULL);
	atomic_store(&stop, 1);
	for (int i = 0; i < conns; i++)
		pthread_join(t[i], NULL);
	printf("{\"bytes\": %llu, \"round_trips\": %llu, \"seconds\": %d}\n",
	       (unsigned long long)atomic_load(&echoed), (unsigned long long)atomic_load(&trips),
	       secs);
	free(t);
	return 0;
}
