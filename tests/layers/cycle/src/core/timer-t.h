#include "core/loop.h"
