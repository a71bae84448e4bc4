/*
 * sdnotify.h - telling a service manager (systemd) how the process is doing: the sd_notify
 * protocol, written here rather than linked from libsystemd.
 *
 * The manager passes NOTIFY_SOCKET, the path of a unix datagram socket ("@name": one in the
 * abstract namespace); a state is one datagram of "KEY=VALUE" lines, such as "READY=1"
 * (started: every listener is bound and every worker runs) or "STOPPING=1" (draining).
 */
#ifndef ACCELNET_NET_SDNOTIFY_H
#define ACCELNET_NET_SDNOTIFY_H

/*
 * Send <state> to the socket named by $NOTIFY_SOCKET. 0 when sent, 0 also when there is no
 * NOTIFY_SOCKET (nobody asked), -EINVAL for a name that cannot be a unix socket address, or
 * the -errno of the send.
 */
int sdnotify_send(const char *state);

#endif
