int sock_open(void);

static int helper(int x)
{
	return x;
}

int c_start(void)
{
	return helper(sock_open());
}
