// LEAP CUDA-on-CPU runtime header: what CUDA device code needs to compile as host C++.
//
// Force-included (precompiled) before every kernel source; the shim headers in include/
// (cuda_runtime.h, cuda_fp16.h, ...) resolve a source's own #includes to nothing more.
#ifndef LEAP_CUDA_CPU_H
#define LEAP_CUDA_CPU_H

#define LEAP_RUNTIME_VERSION 1

#include <assert.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------------------------------------
// Qualifiers
// ---------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __inline_hint__ inline
#define __constant__
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __cluster_dims__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __CUDA_ALIGN__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#ifndef __restrict__
#define __restrict__ __restrict
#endif
#define __CUDACC__ 1
#define __CUDACC_RTC__ 1
#define __NVCC__ 1
#define __CUDACC_VER_MAJOR__ 13
#define __CUDACC_VER_MINOR__ 0
#define CUDART_VERSION 13000
#define __LEAP_CPU_RUNTIME__ 1

// ---------------------------------------------------------------------------------------------
// Built-in vector types and thread coordinates
// ---------------------------------------------------------------------------------------------
#define LEAP_VEC2(T, N, A)                    \
  struct __attribute__((aligned(A))) N##2 {   \
    T x, y;                                   \
  };                                          \
  static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define LEAP_VEC3(T, N)                           \
  struct N##3 {                                   \
    T x, y, z;                                    \
  };                                              \
  static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define LEAP_VEC4(T, N, A)                                                     \
  struct __attribute__((aligned(A))) N##4 {                                    \
    T x, y, z, w;                                                              \
  };                                                                           \
  static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define LEAP_VEC1(T, N, A)                                     \
  struct __attribute__((aligned(A))) N##1 {                    \
    T x;                                                       \
  };                                                           \
  static inline N##1 make_##N##1(T x) { return N##1{x}; }
#define LEAP_VECS(T, N, S)                                          \
  LEAP_VEC1(T, N, S) LEAP_VEC2(T, N, 2 * S) LEAP_VEC3(T, N) LEAP_VEC4(T, N, (4 * S > 16 ? 16 : 4 * S))

LEAP_VECS(signed char, char, 1)
LEAP_VECS(unsigned char, uchar, 1)
LEAP_VECS(short, short, 2)
LEAP_VECS(unsigned short, ushort, 2)
LEAP_VECS(int, int, 4)
LEAP_VECS(unsigned int, uint, 4)
LEAP_VECS(long, long, 8)
LEAP_VECS(unsigned long, ulong, 8)
LEAP_VECS(long long, longlong, 8)
LEAP_VECS(unsigned long long, ulonglong, 8)
LEAP_VECS(float, float, 4)
LEAP_VECS(double, double, 8)

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct __LeapCtx {
  uint3 tidx;
  uint3 bidx;
  uint3 bdim;
  uint3 gdim;
  char* dyn_smem;
};
extern __thread __LeapCtx __leap_ctx;

#define threadIdx (__leap_ctx.tidx)
#define blockIdx (__leap_ctx.bidx)
#define blockDim (__leap_ctx.bdim)
#define gridDim (__leap_ctx.gdim)
#define warpSize 32

// dynamic shared memory (`extern __shared__ T name[];` is rewritten to use this)
static inline void* __leap_dyn_smem() { return __leap_ctx.dyn_smem; }

// ---------------------------------------------------------------------------------------------
// Runtime interface (leap_runtime.cpp)
// ---------------------------------------------------------------------------------------------
enum {
  LEAP_ERR_NONE = 0,
  LEAP_ERR_KERNEL = 1,
  LEAP_ERR_DEADLOCK = 2,
  LEAP_ERR_UNSUPPORTED = 3,
  LEAP_ERR_LAUNCH = 4,
  LEAP_ERR_MEMORY = 5,
};
enum {
  LEAP_W_SYNC = 1, LEAP_W_SHFL, LEAP_W_UP, LEAP_W_DOWN, LEAP_W_XOR, LEAP_W_BALLOT, LEAP_W_ANY, LEAP_W_ALL,
  LEAP_W_MATCH_ANY, LEAP_W_REDUCE_ADD, LEAP_W_REDUCE_MIN, LEAP_W_REDUCE_MAX, LEAP_W_REDUCE_AND,
  LEAP_W_REDUCE_OR, LEAP_W_REDUCE_XOR, LEAP_W_ACTIVEMASK,
};

struct LeapLaunch {
  unsigned int grid[3];
  unsigned int block[3];
  unsigned long long shmem;
  int workers;
  int shuffle;
  unsigned long long seed;
  int status;
  char message[2048];
};

int __leap_sync_block(int pred, int line);
unsigned long long __leap_warp_op(int kind, unsigned mask, unsigned long long val, int arg, int width, int line);
[[noreturn]] void __leap_trap(int kind, const char* msg);
int __leap_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
int __leap_run_grid(LeapLaunch* L, void (*thunk)(void**), void** args);

#define printf __leap_printf
namespace std {
using ::__leap_printf;
}

// ---------------------------------------------------------------------------------------------
// Barriers and warp operations
// ---------------------------------------------------------------------------------------------
static inline void __syncthreads(int __line = __builtin_LINE()) { __leap_sync_block(0, __line); }
static inline int __syncthreads_count(int p, int __line = __builtin_LINE()) { return __leap_sync_block(p, __line); }
static inline int __syncthreads_and(int p, int __line = __builtin_LINE()) {
  return __leap_sync_block(p, __line) == int(blockDim.x * blockDim.y * blockDim.z);
}
static inline int __syncthreads_or(int p, int __line = __builtin_LINE()) { return __leap_sync_block(p, __line) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu, int __line = __builtin_LINE()) {
  __leap_warp_op(LEAP_W_SYNC, mask, 0, 0, 32, __line);
}
static inline unsigned __activemask(int __line = __builtin_LINE()) {
  return unsigned(__leap_warp_op(LEAP_W_ACTIVEMASK, 0, 0, 0, 32, __line));
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] static inline void __trap() { __leap_trap(LEAP_ERR_KERNEL, "__trap() called: the kernel aborted"); }
[[noreturn]] static inline void __brkpt() { __leap_trap(LEAP_ERR_KERNEL, "__brkpt() called"); }
static inline void __nanosleep(unsigned) {}
static inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }
static inline long long __clock64() { return clock64(); }
static inline unsigned __laneid() { return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u; }

template <class T>
static inline unsigned long long __leap_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
static inline T __leap_from_bits(unsigned long long b) {
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}
template <class T>
static inline T __shfl_sync(unsigned mask, T var, int src, int width = warpSize, int __line = __builtin_LINE()) {
  return __leap_from_bits<T>(__leap_warp_op(LEAP_W_SHFL, mask, __leap_bits(var), src, width, __line));
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned d, int width = warpSize, int __line = __builtin_LINE()) {
  return __leap_from_bits<T>(__leap_warp_op(LEAP_W_UP, mask, __leap_bits(var), int(d), width, __line));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned d, int width = warpSize, int __line = __builtin_LINE()) {
  return __leap_from_bits<T>(__leap_warp_op(LEAP_W_DOWN, mask, __leap_bits(var), int(d), width, __line));
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int m, int width = warpSize, int __line = __builtin_LINE()) {
  return __leap_from_bits<T>(__leap_warp_op(LEAP_W_XOR, mask, __leap_bits(var), m, width, __line));
}
static inline unsigned __ballot_sync(unsigned mask, int pred, int __line = __builtin_LINE()) {
  return unsigned(__leap_warp_op(LEAP_W_BALLOT, mask, pred != 0, 0, 32, __line));
}
static inline int __any_sync(unsigned mask, int pred, int __line = __builtin_LINE()) {
  return int(__leap_warp_op(LEAP_W_ANY, mask, pred != 0, 0, 32, __line));
}
static inline int __all_sync(unsigned mask, int pred, int __line = __builtin_LINE()) {
  return int(__leap_warp_op(LEAP_W_ALL, mask, pred != 0, 0, 32, __line));
}
static inline int __uni_sync(unsigned mask, int pred, int __line = __builtin_LINE()) {
  unsigned b = unsigned(__leap_warp_op(LEAP_W_BALLOT, mask, pred != 0, 0, 32, __line));
  return b == 0 || (b & mask) == (mask & ~0u);
}
template <class T>
static inline unsigned __match_any_sync(unsigned mask, T v, int __line = __builtin_LINE()) {
  return unsigned(__leap_warp_op(LEAP_W_MATCH_ANY, mask, __leap_bits(v), 0, 32, __line));
}
#define LEAP_REDUCE(NAME, KIND, T, SIGNED)                                                      \
  static inline T NAME(unsigned mask, T v, int __line = __builtin_LINE()) {                   \
    return T(__leap_warp_op(KIND, mask, (unsigned long long)(unsigned)v, SIGNED, 32, __line)); \
  }
LEAP_REDUCE(__reduce_add_sync, LEAP_W_REDUCE_ADD, unsigned, 0)
LEAP_REDUCE(__reduce_add_sync, LEAP_W_REDUCE_ADD, int, 1)
LEAP_REDUCE(__reduce_min_sync, LEAP_W_REDUCE_MIN, unsigned, 0)
LEAP_REDUCE(__reduce_min_sync, LEAP_W_REDUCE_MIN, int, 1)
LEAP_REDUCE(__reduce_max_sync, LEAP_W_REDUCE_MAX, unsigned, 0)
LEAP_REDUCE(__reduce_max_sync, LEAP_W_REDUCE_MAX, int, 1)
LEAP_REDUCE(__reduce_and_sync, LEAP_W_REDUCE_AND, unsigned, 0)
LEAP_REDUCE(__reduce_or_sync, LEAP_W_REDUCE_OR, unsigned, 0)
LEAP_REDUCE(__reduce_xor_sync, LEAP_W_REDUCE_XOR, unsigned, 0)
#undef LEAP_REDUCE

// ---------------------------------------------------------------------------------------------
// Atomics (blocks run on several OS threads: these are real atomic operations)
// ---------------------------------------------------------------------------------------------
#define LEAP_ATOMIC_INT(T)                                                                                   \
  static inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }              \
  static inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }              \
  static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }            \
  static inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }              \
  static inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }                \
  static inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }              \
  static inline T atomicCAS(T* a, T cmp, T v) {                                                             \
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                    \
    return cmp;                                                                                             \
  }                                                                                                         \
  static inline T atomicMin(T* a, T v) {                                                                    \
    T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                                           \
    while (v < old && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
    }                                                                                                       \
    return old;                                                                                             \
  }                                                                                                         \
  static inline T atomicMax(T* a, T v) {                                                                    \
    T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                                           \
    while (v > old && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
    }                                                                                                       \
    return old;                                                                                             \
  }
LEAP_ATOMIC_INT(int)
LEAP_ATOMIC_INT(unsigned int)
LEAP_ATOMIC_INT(unsigned long long)
LEAP_ATOMIC_INT(long long)
#undef LEAP_ATOMIC_INT
static inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}
static inline unsigned atomicInc(unsigned* a, unsigned lim) {
  unsigned old = __atomic_load_n(a, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(a, &old, old >= lim ? 0u : old + 1u, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
static inline unsigned atomicDec(unsigned* a, unsigned lim) {
  unsigned old = __atomic_load_n(a, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(a, &old, (old == 0u || old > lim) ? lim : old - 1u, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return old;
}
template <class F, class U, class Op>
static inline F __leap_atomic_float(F* a, F v, Op op) {
  U* ua = reinterpret_cast<U*>(a);
  U old = __atomic_load_n(ua, __ATOMIC_RELAXED);
  for (;;) {
    F of;
    memcpy(&of, &old, sizeof(F));
    F nf = op(of, v);
    U nu;
    memcpy(&nu, &nf, sizeof(F));
    if (__atomic_compare_exchange_n(ua, &old, nu, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return of;
  }
}
static inline float atomicAdd(float* a, float v) {
  return __leap_atomic_float<float, unsigned>(a, v, [](float x, float y) { return x + y; });
}
static inline double atomicAdd(double* a, double v) {
  return __leap_atomic_float<double, unsigned long long>(a, v, [](double x, double y) { return x + y; });
}
static inline float atomicSub(float* a, float v) {
  return __leap_atomic_float<float, unsigned>(a, v, [](float x, float y) { return x - y; });
}
static inline double atomicSub(double* a, double v) {
  return __leap_atomic_float<double, unsigned long long>(a, v, [](double x, double y) { return x - y; });
}
static inline float atomicMin(float* a, float v) {
  return __leap_atomic_float<float, unsigned>(a, v, [](float x, float y) { return fminf(x, y); });
}
static inline float atomicMax(float* a, float v) {
  return __leap_atomic_float<float, unsigned>(a, v, [](float x, float y) { return fmaxf(x, y); });
}
static inline double atomicMin(double* a, double v) {
  return __leap_atomic_float<double, unsigned long long>(a, v, [](double x, double y) { return fmin(x, y); });
}
static inline double atomicMax(double* a, double v) {
  return __leap_atomic_float<double, unsigned long long>(a, v, [](double x, double y) { return fmax(x, y); });
}
static inline float atomicExch(float* a, float v) {
  unsigned r = __atomic_exchange_n(reinterpret_cast<unsigned*>(a), __leap_from_bits<unsigned>(__leap_bits(v)),
                                   __ATOMIC_RELAXED);
  return __leap_from_bits<float>(r);
}
static inline double atomicExch(double* a, double v) {
  unsigned long long r = __atomic_exchange_n(reinterpret_cast<unsigned long long*>(a), __leap_bits(v), __ATOMIC_RELAXED);
  return __leap_from_bits<double>(r);
}
#define LEAP_ATOMIC_SCOPES(NAME)                                                    \
  template <class T, class... R>                                                    \
  static inline auto NAME##_block(T* a, R... r) -> decltype(NAME(a, r...)) {       \
    return NAME(a, r...);                                                           \
  }                                                                                 \
  template <class T, class... R>                                                    \
  static inline auto NAME##_system(T* a, R... r) -> decltype(NAME(a, r...)) {      \
    return NAME(a, r...);                                                           \
  }
LEAP_ATOMIC_SCOPES(atomicAdd)
LEAP_ATOMIC_SCOPES(atomicSub)
LEAP_ATOMIC_SCOPES(atomicExch)
LEAP_ATOMIC_SCOPES(atomicMin)
LEAP_ATOMIC_SCOPES(atomicMax)
LEAP_ATOMIC_SCOPES(atomicCAS)
LEAP_ATOMIC_SCOPES(atomicAnd)
LEAP_ATOMIC_SCOPES(atomicOr)
LEAP_ATOMIC_SCOPES(atomicXor)
#undef LEAP_ATOMIC_SCOPES

// ---------------------------------------------------------------------------------------------
// Loads and stores with cache hints
// ---------------------------------------------------------------------------------------------
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }

#include "leap_cuda_math.h"
#include "leap_cuda_half.h"

// ---------------------------------------------------------------------------------------------
// Kernel entry glue used by the generated launchers
// ---------------------------------------------------------------------------------------------
template <class... A, size_t... I>
static inline void __leap_invoke_impl(void (*f)(A...), void** a, std::index_sequence<I...>) {
  f(*reinterpret_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(a[I])...);
}
template <class... A>
static inline void __leap_invoke(void (*f)(A...), void** a) {
  __leap_invoke_impl(f, a, std::index_sequence_for<A...>{});
}

#endif  // LEAP_CUDA_CPU_H
