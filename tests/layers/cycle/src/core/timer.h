#include "core/timer-t.h"
