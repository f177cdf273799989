/* Shim: see types.h. */
#include <asm-generic/posix_types.h>
