/*
 * dashboard.c - finding the dashboard's embedded files by path (see dashboard.h).
 */
#include "obs/dashboard.h"

#include <string.h>

const char dashboard_headers[] =
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "X-Frame-Options: DENY\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Cache-Control: no-cache\r\n";

const struct dashboard_asset *dashboard_find(const char *path, size_t len)
{
	for (const struct dashboard_asset *a = dashboard_assets; a->path; a++)
		if (strlen(a->path) == len && memcmp(a->path, path, len) == 0)
			return a;
	return NULL;
}
