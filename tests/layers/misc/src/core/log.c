#include "core/nothere.h"
#include <stdio.h>
