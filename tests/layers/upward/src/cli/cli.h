#include "proxy/proxy.h"
