#include "http/parse.h"
#include "core/log.h"
