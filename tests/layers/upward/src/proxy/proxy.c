#include "accelnet/xfer.h"
#include "xfer/engine.h"
#include "cli/cli.h"
