#include "net/c.h"
