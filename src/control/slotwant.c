/*
 * slotwant.c - a pool's loose waiters (waiting for no backend in particular) spread over its
 * capped backends once, for the slots script's deal (slotwant.h says why).
 */
#include "control/slotwant.h"

unsigned slotwant_waiting(unsigned own, unsigned loose, size_t k, size_t ncapped, size_t turn)
{
	if (!ncapped)
		return own;
	size_t from = (k + ncapped - turn % ncapped) % ncapped; /* its place after the turn */
	return own + (unsigned)(loose / ncapped) + (from < loose % ncapped);
}
