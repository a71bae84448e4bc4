#include "core/log.h"
#include "net/sock.h"
