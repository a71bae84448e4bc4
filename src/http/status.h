/*
 * status.h - the reason phrase of an HTTP status code ("Bad Gateway" for 502).
 */
#ifndef ACCELNET_HTTP_STATUS_H
#define ACCELNET_HTTP_STATUS_H

const char *http_status_text(int status);

#endif
