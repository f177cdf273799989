/* Shim: see types.h. */
#include <asm-generic/bitsperlong.h>
