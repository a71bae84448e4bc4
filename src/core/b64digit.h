/*
 * b64digit.h - the value of one base64 digit, for the decoders that read base64 (credentials
 * and JWTs in guard/b64.c, gRPC-Web's text mode in http/grpc_web.c): one definition, the
 * alphabets differing only in their last two digits.
 */
#ifndef ACCELNET_CORE_B64DIGIT_H
#define ACCELNET_CORE_B64DIGIT_H

/* 0..63 for 'A'-'Z', 'a'-'z', '0'-'9', <d62>, <d63> ('+' '/' or base64url's '-' '_'); -1 for
 * any other byte. */
static inline int b64_digit(unsigned char c, char d62, char d63)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == (unsigned char)d62)
		return 62;
	if (c == (unsigned char)d63)
		return 63;
	return -1;
}

#endif
