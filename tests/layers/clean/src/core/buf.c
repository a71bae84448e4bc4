#include "core/buf.h"
#include "buf.h"
// #include "cli/cli.h"
