/*
 * test_xfer_store.c - the receiver's store as its hourly sweep sees it: a batched file's
 * temporary copy that a writer is at (its time already set to the sender's, years back) is
 * not taken for one abandoned and unlinked under its writer's rename; and a small file put in
 * place whole by a batch while an end-game chunk copy of it had a part created leaves nothing in
 * the directory of partial files once finished.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <dirent.h>
#include <xxhash.h>

#include "xfer/store.h"

/* A batch's file between its futimens (the sender's time) and its rename. */
static void sweep_keeps_a_batched_file_being_written(void **state)
{
	(void)state;
	char root[] = "/tmp/test_xfer_store.XXXXXX";
	assert_non_null(mkdtemp(root));
	int dirfd = open(root, O_RDONLY | O_DIRECTORY);
	assert_true(dirfd >= 0);
	assert_int_equal(mkdirat(dirfd, XFER_STORE_DIR, 0700), 0);
	int sd = openat(dirfd, XFER_STORE_DIR, O_RDONLY | O_DIRECTORY);
	assert_true(sd >= 0);
	const char *name = "0123456789abcdef0123456789abcdef.00000001.tmp";
	int fd = openat(sd, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = 1000000000}}; /* 2001 */
	assert_int_equal(futimens(fd, times), 0);
	close(fd);
	unsigned removed = 99;
	assert_int_equal(xfer_store_sweep(dirfd, 3600, &removed), 0);
	assert_int_equal(removed, 0);
	assert_int_equal(faccessat(sd, name, F_OK, 0), 0); /* its writer's rename would find it */
	assert_int_equal(unlinkat(sd, name, 0), 0);
	close(sd);
	assert_int_equal(unlinkat(dirfd, XFER_STORE_DIR, AT_REMOVEDIR), 0);
	close(dirfd);
	assert_int_equal(rmdir(root), 0);
}

/* Entries in DIR/.accelnet-xfer, its names in <names> (the first few). */
static int staging_count(int dirfd, char *names, size_t len)
{
	int sd = openat(dirfd, XFER_STORE_DIR, O_RDONLY | O_DIRECTORY);
	assert_true(sd >= 0);
	DIR *d = fdopendir(sd);
	assert_non_null(d);
	int n = 0;
	names[0] = 0;
	for (struct dirent *de; (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		n++;
		size_t at = strlen(names);
		snprintf(names + at, len - at, "%s ", de->d_name);
	}
	closedir(d);
	return n;
}

/*
 * As the receiver meets it: an end-game CHUNK copy of a small file acquires it (creating its part
 * and state) while its BATCH puts it in place whole; the copy's writer has let go (<held> 0) or
 * still holds it when the batch's writer is done (1). Finishing leaves the file in place and
 * nothing in the directory of partial files.
 */
static void batched_file_beside_a_copy(int held)
{
	char root[] = "/tmp/test_xfer_store.XXXXXX";
	assert_non_null(mkdtemp(root));
	int dirfd = open(root, O_RDONLY | O_DIRECTORY);
	assert_true(dirfd >= 0);
	uint8_t data[1000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + held);
	struct xfer_file fi = {.path = (char *)"s.txt",
			       .size = sizeof(data),
			       .mode = 0644,
			       .mtime_ns = 123456789,
			       .nchunks = 1};
	struct xfer_manifest m = {.chunk_size = 64 * 1024, .nfiles = 1, .files = &fi};
	struct xfer_store_file f;
	struct xfer_store_dirs dirs = XFER_STORE_DIRS_INIT;
	const char *why = NULL;
	char names[256];
	uint64_t hash = XXH3_64bits(data, sizeof(data));
	assert_int_equal(xfer_store_open(dirfd, &m, 0, 0, &f, &why), 0);
	assert_int_equal(xfer_store_acquire(dirfd, &f, &why), 0); /* the copy's writer */
	assert_int_equal(staging_count(dirfd, names, sizeof(names)), 2);
	assert_int_equal(xfer_store_put_whole(dirfd, &f, data, &dirs, &why), 0); /* the batch */
	xfer_store_dirs_close(&dirs);
	assert_int_equal(xfer_store_mark(&f, 0, hash), 1);
	f.in_place = 1;
	if (!held)
		xfer_store_release(&f);
	uint8_t whole[16];
	uint32_t bad = UINT32_MAX;
	xfer_whole_hash(&hash, 1, whole);
	assert_int_equal(xfer_store_finish(dirfd, &f, whole, &dirs, &bad, &why), 0);
	xfer_store_dirs_close(&dirs);
	int left = staging_count(dirfd, names, sizeof(names));
	if (left)
		fail_msg("held %d: left after finish: %s", held, names);
	uint8_t got[sizeof(data) + 1];
	int fd = openat(dirfd, "s.txt", O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, got, sizeof(got)), sizeof(data));
	assert_memory_equal(got, data, sizeof(data));
	close(fd);
	xfer_store_close(&f);
	assert_int_equal(unlinkat(dirfd, "s.txt", 0), 0);
	assert_int_equal(unlinkat(dirfd, XFER_STORE_DIR, AT_REMOVEDIR), 0);
	close(dirfd);
	assert_int_equal(rmdir(root), 0);
}

static void finish_of_a_batched_file_removes_a_copys_part(void **state)
{
	(void)state;
	batched_file_beside_a_copy(0);
	batched_file_beside_a_copy(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(sweep_keeps_a_batched_file_being_written),
	    cmocka_unit_test(finish_of_a_batched_file_removes_a_copys_part),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
