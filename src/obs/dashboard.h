/*
 * dashboard.h - the files of the live dashboard that the admin listener serves
 * (GET /dashboard, /dashboard.js, /dashboard.css).
 *
 * The page, its script and its style sheet are ordinary files of src/obs/dashboard/; the
 * build embeds them (scripts/embed-assets.sh writes dashboard_assets.c into the build
 * folder), so the binary serves them with nothing to install. The page holds no data: it
 * reads the feed (json.h, json_write_feed) once a second and draws it itself.
 */
#ifndef ACCELNET_OBS_DASHBOARD_H
#define ACCELNET_OBS_DASHBOARD_H

#include <stddef.h>

struct dashboard_asset {
	const char *path; /* "/dashboard", "/dashboard.js", ... */
	const char *type; /* Content-Type */
	const unsigned char *data;
	size_t len;
};

/* The embedded files, ended by one with a NULL path (generated at build time). */
extern const struct dashboard_asset dashboard_assets[];

/*
 * Response header lines (each ending in CRLF) to send with every asset: a Content-Security-
 * Policy that lets the page load only its own script, style and feed, no sniffing, no framing,
 * no Referer, and no use of a cached copy without asking again (Cache-Control: no-cache).
 */
extern const char dashboard_headers[];

/* The asset served at <path> (<len> bytes, exact match), or NULL. */
const struct dashboard_asset *dashboard_find(const char *path, size_t len);

#endif
