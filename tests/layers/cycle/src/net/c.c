#include "net/a.h"
