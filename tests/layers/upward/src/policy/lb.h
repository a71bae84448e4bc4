#include "accelnet/xfer.h"
