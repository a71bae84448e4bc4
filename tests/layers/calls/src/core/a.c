#include "core/a.h"

int a_run(void)
{
	return b_go();
}
