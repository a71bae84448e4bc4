#include "accelnet/xfer.h"
#include "http/parse.h"
#include "conf/conf.h"
