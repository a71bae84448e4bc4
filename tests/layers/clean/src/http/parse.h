#include "net/sock.h"
