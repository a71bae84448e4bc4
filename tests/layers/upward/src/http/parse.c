#include "conf/conf.h"
