#include "core/timer.h"
