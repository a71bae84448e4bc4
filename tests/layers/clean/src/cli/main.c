#include "accelnet/xfer.h"
#include "http/parse.h"
  #  include "core/log.h"
