// CUDA device math: fast intrinsics, rounding-mode variants, bit tricks, min/max overloads.
// Included by leap_cuda_cpu.h after the C math library.
#ifndef LEAP_CUDA_MATH_H
#define LEAP_CUDA_MATH_H

// fast-math intrinsics (full precision here)
// glibc declares these reserved names itself (as the plain functions); alias them
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __sincosf sincosf
#define __powf powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : fminf(fmaxf(x, 0.0f), 1.0f); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline double rcbrt(double x) { return 1.0 / cbrt(x); }
static inline float sinpif(float x) { return sinf(float(M_PI) * x); }
static inline float cospif(float x) { return cosf(float(M_PI) * x); }
static inline double sinpi(double x) { return sin(M_PI * x); }
static inline double cospi(double x) { return cos(M_PI * x); }
static inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * float(M_SQRT1_2)); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }
static inline float erfcxf(float x) { return expf(x * x) * erfcf(x); }
static inline double erfcx(double x) { return exp(x * x) * erfc(x); }
static inline float __leap_erfinv(float y) {
  // Giles' approximation refined by two Newton steps
  if (y <= -1.0f) return -INFINITY;
  if (y >= 1.0f) return INFINITY;
  float w = -logf((1.0f - y) * (1.0f + y)), x;
  if (w < 5.0f) {
    w -= 2.5f;
    x = 2.81022636e-08f; x = 3.43273939e-07f + x * w; x = -3.5233877e-06f + x * w; x = -4.39150654e-06f + x * w;
    x = 0.00021858087f + x * w; x = -0.00125372503f + x * w; x = -0.00417768164f + x * w; x = 0.246640727f + x * w;
    x = 1.50140941f + x * w;
  } else {
    w = sqrtf(w) - 3.0f;
    x = -0.000200214257f; x = 0.000100950558f + x * w; x = 0.00134934322f + x * w; x = -0.00367342844f + x * w;
    x = 0.00573950773f + x * w; x = -0.0076224613f + x * w; x = 0.00943887047f + x * w; x = 1.00167406f + x * w;
    x = 2.83297682f + x * w;
  }
  double r = double(x) * y;
  for (int i = 0; i < 2; ++i) r -= (erf(r) - y) / (2.0 / sqrt(M_PI) * exp(-r * r));
  return float(r);
}
static inline float erfinvf(float y) { return __leap_erfinv(y); }
static inline float erfcinvf(float y) { return __leap_erfinv(1.0f - y); }
static inline float normcdfinvf(float p) { return -float(M_SQRT2) * erfcinvf(2.0f * p); }
static inline float exp10f_(float x) { return exp10f(x); }

// rounding-mode arithmetic (round-to-nearest is the host's mode; other modes approximate)
#define LEAP_RN_OPS(SUF)                                                          \
  static inline float __fadd_##SUF(float a, float b) { return a + b; }          \
  static inline float __fsub_##SUF(float a, float b) { return a - b; }          \
  static inline float __fmul_##SUF(float a, float b) { return a * b; }          \
  static inline float __fdiv_##SUF(float a, float b) { return a / b; }          \
  static inline float __fmaf_##SUF(float a, float b, float c) { return fmaf(a, b, c); } \
  static inline double __dadd_##SUF(double a, double b) { return a + b; }       \
  static inline double __dsub_##SUF(double a, double b) { return a - b; }       \
  static inline double __dmul_##SUF(double a, double b) { return a * b; }       \
  static inline double __ddiv_##SUF(double a, double b) { return a / b; }       \
  static inline double __fma_##SUF(double a, double b, double c) { return fma(a, b, c); }
LEAP_RN_OPS(rn)
LEAP_RN_OPS(rz)
LEAP_RN_OPS(ru)
LEAP_RN_OPS(rd)
#undef LEAP_RN_OPS
static inline float __fmaf_ieee_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __drcp_rn(double x) { return 1.0 / x; }
static inline double __dsqrt_rn(double x) { return sqrt(x); }

// conversions
static inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
static inline int __float2int_rz(float x) { return int(truncf(x)); }
static inline int __float2int_ru(float x) { return int(ceilf(x)); }
static inline int __float2int_rd(float x) { return int(floorf(x)); }
static inline unsigned __float2uint_rn(float x) { return unsigned(nearbyintf(x)); }
static inline unsigned __float2uint_rz(float x) { return unsigned(truncf(x)); }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline long long __float2ll_rz(float x) { return (long long)truncf(x); }
static inline int __double2int_rn(double x) { return int(nearbyint(x)); }
static inline int __double2int_rz(double x) { return int(trunc(x)); }
static inline long long __double2ll_rn(double x) { return (long long)nearbyint(x); }
static inline float __double2float_rn(double x) { return float(x); }
static inline float __int2float_rn(int x) { return float(x); }
static inline float __uint2float_rn(unsigned x) { return float(x); }
static inline float __ll2float_rn(long long x) { return float(x); }
static inline double __int2double_rn(int x) { return double(x); }
static inline double __ll2double_rn(long long x) { return double(x); }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline int __double2hiint(double x) { return int(__double_as_longlong(x) >> 32); }
static inline int __double2loint(double x) { return int(__double_as_longlong(x)); }
static inline double __hiloint2double(int hi, int lo) {
  return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}

// integer intrinsics
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
  return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev(unsigned(x)) << 32) | __brev(unsigned(x >> 32));
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
static inline int __mul24(int a, int b) { return int((long long)((a << 8) >> 8) * ((b << 8) >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
static inline int __mulhi(int a, int b) { return int(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned(((unsigned long long)a * b) >> 32); }
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned __sad(int a, int b, unsigned c) { return c + unsigned(a > b ? a - b : b - a); }
static inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
static inline int __hadd(int a, int b) { return int(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return int(((long long)a + b + 1) >> 1); }
static inline unsigned __uhadd(unsigned a, unsigned b) { return unsigned(((unsigned long long)a + b) >> 1); }
static inline unsigned __urhadd(unsigned a, unsigned b) { return unsigned(((unsigned long long)a + b + 1) >> 1); }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return unsigned((v << (s & 31)) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return unsigned(v >> (s & 31));
}

// min / max: CUDA's global overloads (mixed signedness converts to unsigned, as CUDA does)
#define LEAP_MINMAX(A, B, R)                                   \
  static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; } \
  static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
LEAP_MINMAX(int, int, int)
LEAP_MINMAX(unsigned, unsigned, unsigned)
LEAP_MINMAX(int, unsigned, unsigned)
LEAP_MINMAX(unsigned, int, unsigned)
LEAP_MINMAX(long, long, long)
LEAP_MINMAX(unsigned long, unsigned long, unsigned long)
LEAP_MINMAX(long, unsigned long, unsigned long)
LEAP_MINMAX(unsigned long, long, unsigned long)
LEAP_MINMAX(long long, long long, long long)
LEAP_MINMAX(unsigned long long, unsigned long long, unsigned long long)
LEAP_MINMAX(long long, unsigned long long, unsigned long long)
LEAP_MINMAX(unsigned long long, long long, unsigned long long)
#undef LEAP_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(float a, double b) { return fmin(a, b); }
static inline double max(float a, double b) { return fmax(a, b); }
static inline double min(double a, float b) { return fmin(a, b); }
static inline double max(double a, float b) { return fmax(a, b); }
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// float overloads of the double functions (CUDA has them in the global namespace)
using std::abs;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

#endif  // LEAP_CUDA_MATH_H
