#include "net/b.h"
#include "core/log.h"
