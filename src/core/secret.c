/*
 * secret.c - see secret.h. The file is read whole into a scratch buffer one byte longer
 * than allowed (so an over-long secret is seen), then copied out and the scratch wiped.
 */
#include "core/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int secret_load(const char *path, uint8_t *out, size_t cap, size_t *len, const char **why)
{
	size_t n = 0, room = cap + 3; /* the secret, CR LF, and one byte to see it is too long */
	uint8_t *buf = malloc(room);
	int rc = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!buf || fd < 0) {
		rc = !buf ? -ENOMEM : -errno;
		*why = !buf ? "out of memory" : "cannot open the token file";
		goto fail;
	}
	for (ssize_t r = 1; r > 0 && n < room; n += (size_t)r)
		if ((r = read(fd, buf + n, room - n)) < 0) {
			rc = -errno;
			*why = "cannot read the token file";
			goto fail;
		}
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n == 0 || n > cap) {
		rc = -EINVAL;
		*why = "the token file is empty or too long";
		goto fail;
	}
	memcpy(out, buf, n);
	*len = n;
fail:
	if (buf) {
		OPENSSL_cleanse(buf, room);
		free(buf);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

int secret_file_read(const char *path, size_t max, char **buf, size_t *len, char *err,
		     size_t errlen)
{
	struct stat st;
	size_t n = 0, room = 0;
	int rc = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
	*buf = NULL;
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	/* one byte more than the file should hold, so one that grew or lied is seen */
	room = (st.st_size > 0 && (uint64_t)st.st_size < max ? (size_t)st.st_size : max) + 1;
	if (!(*buf = malloc(room))) {
		rc = -ENOMEM;
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	for (ssize_t r = 1; r > 0 && n < room; n += (size_t)r)
		if ((r = read(fd, *buf + n, room - n)) < 0) {
			rc = -errno;
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
			goto out;
		}
	if (n > max) {
		rc = -EFBIG;
		snprintf(err, errlen, "%s: larger than %zu %s", path,
			 max >= 1u << 20 ? max >> 20 : max >> 10, max >= 1u << 20 ? "MiB" : "KiB");
	}
out:
	if (rc < 0 && *buf) {
		secret_file_free(*buf, room);
		*buf = NULL;
	}
	if (fd >= 0)
		close(fd);
	*len = rc < 0 ? 0 : n;
	return rc;
}

void secret_file_free(char *buf, size_t len)
{
	if (!buf)
		return;
	OPENSSL_cleanse(buf, len);
	free(buf);
}
