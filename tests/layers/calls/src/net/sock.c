#include "core/c.h"

int sock_open(void)
{
	return 0;
}

static int sock_twice(void)
{
	return sock_open() + sock_open();
}
