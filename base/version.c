/* version.c — the version the library reports at run time (include/zinc.h's zinc_version_*).
 * The numbers are include/zinc.h's macros compiled into the library, so a program can tell the
 * header it was built against from the libzinc.so it runs with; `zinc --version` prints this. */
#include "zinc.h"

unsigned zinc_version_number(void) { return ZINC_VERSION_NUMBER; }

const char *zinc_version_string(void) { return ZINC_VERSION_STRING; }
