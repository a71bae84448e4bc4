#include "policy/lb.h"
