#include "core/log.h"
#include "core/buf.h"
