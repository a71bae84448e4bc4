/* core/log: logging */
#include <stdio.h>
