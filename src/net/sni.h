/*
 * sni.h - the server name a TLS client asks for, read from its ClientHello without taking
 * part in the handshake: what an L4 listener routes TLS by while passing it through
 * untouched (listen.sni, proxy/l4.h).
 *
 * Only what leads to the server_name extension is read (RFC 8446 4.1.2, RFC 6066 3): the
 * record header, the handshake header, the fixed fields and the length-prefixed ones skipped
 * by their lengths, each checked against what holds it, and the extensions walked to the
 * first host_name. Refused as no ClientHello: another record or handshake type, a length that
 * runs past what holds it, a hello split over more than one record (the peer's first record
 * is read alone: 16 KiB, far above any hello seen in use), two server_name extensions, a
 * name that is empty, longer than 255 bytes, or holds a byte other than a letter, digit,
 * '-', '_' or '.'. The name is returned as it came (DNS names compare without case).
 */
#ifndef ACCELNET_NET_SNI_H
#define ACCELNET_NET_SNI_H

#include <stddef.h>
#include <stdint.h>

#define NET_SNI_RECORD_MAX (5 + 16384) /* a TLS record's header and its largest body */

/*
 * Read the server name of the ClientHello that starts buf[len]. 1: *name (into buf) and
 * *namelen set; 0: a whole ClientHello that names no server; -EAGAIN: the record is not all
 * there yet (read more, up to NET_SNI_RECORD_MAX); -EINVAL: these bytes are no ClientHello
 * this reader takes.
 */
int net_sni_parse(const uint8_t *buf, size_t len, const char **name, size_t *namelen);

#endif
