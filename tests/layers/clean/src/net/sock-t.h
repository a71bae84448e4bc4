#include "core/buf.h"
