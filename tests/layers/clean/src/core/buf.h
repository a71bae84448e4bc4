/* #include "net/sock.h" in a comment does not count */
