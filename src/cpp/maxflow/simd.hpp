// Vector instructions: MAXFLOW_AVX2 where the compiler can emit AVX2 code for a function
// (x86-64, GCC or Clang, via __attribute__((target("avx2")))), and HAS_AVX2, whether this CPU
// runs it (checked once, at load). A kernel with an AVX2 twin calls it only when both hold.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MAXFLOW_AVX2 1

namespace maxflow {

inline const bool HAS_AVX2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}();

}  // namespace maxflow
#endif
