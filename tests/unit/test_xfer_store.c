/*
 * test_xfer_store.c - the receiver's store as its hourly sweep sees it: a batched file's
 * temporary copy that a writer is at (its time already set to the sender's, years back) is
 * not taken for one abandoned and unlinked under its writer's rename.
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(sweep_keeps_a_batched_file_being_written),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
