// Switches the compiler's target for the code between VISATTN_TARGET_BEGIN("feature,...") and
// VISATTN_TARGET_END, for GCC and clang. Used by each kernel TU after kernel_prelude.h.
#pragma once

#define VISATTN_PRAGMA(text) _Pragma(#text)

#if defined(__clang__)
#define VISATTN_TARGET_BEGIN(features) \
  VISATTN_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define VISATTN_TARGET_END _Pragma("clang attribute pop")
#else
// GCC 12 also warns about the deliberately undefined lanes of its own AVX-512 intrinsics.
#define VISATTN_TARGET_BEGIN(features)                              \
  _Pragma("GCC push_options")                                       \
  _Pragma("GCC diagnostic push")                                    \
  _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")       \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")             \
  VISATTN_PRAGMA(GCC target(features))
#define VISATTN_TARGET_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif
