/* Shim: clang -target bpf has no multiarch include dir; the generic definitions suffice. */
#include <asm-generic/types.h>
