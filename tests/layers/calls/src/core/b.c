#include "core/b.h"
#include "core/a.h"

int b_go(void)
{
	return a_run();
}
