#ifndef C_H
#define C_H
int c_start(void);
static inline int c_inline(void)
{
	return c_start();
}
#endif
