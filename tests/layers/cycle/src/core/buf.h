#include "core/buf-t.h"
