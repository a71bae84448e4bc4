#include "net/sock-t.h"
#include "core/log.h"
