// __half and __nv_bfloat16 (with their 2-vectors) for the CPU runtime: storage, IEEE round-to-
// nearest-even conversions, arithmetic through float, and the cuda_fp16.h / cuda_bf16.h intrinsics.
// The class shapes mirror CUDA's (implicit conversion from and to float and the integer types), so
// overload resolution behaves as it does under NVRTC.
#ifndef LEAP_CUDA_HALF_H
#define LEAP_CUDA_HALF_H

static inline unsigned short __leap_f2h_bits(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  unsigned sign = (x >> 16) & 0x8000u;
  unsigned ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return (unsigned short)(sign | (ax > 0x7F800000u ? 0x7FFFu : 0x7C00u));
  if (ax >= 0x477FF000u) return (unsigned short)(sign | 0x7C00u);  // rounds to infinity
  if (ax < 0x38800000u) {                                           // subnormal half (or zero)
    if (ax < 0x33000000u) return (unsigned short)sign;
    unsigned e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
    unsigned shift = 126 - e;  // 14 + (113 - e) - 1
    unsigned r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return (unsigned short)(sign | r);
  }
  unsigned r = ((ax - 0x38000000u) >> 13);
  unsigned rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return (unsigned short)(sign | r);
}
static inline float __leap_h2f_bits(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FFu, x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // normalize a subnormal
      e = 113;
      while (!(m & 0x400u)) { m <<= 1; --e; }
      x = sign | (e << 23) | ((m & 0x3FFu) << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7F800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static inline unsigned short __leap_f2bf_bits(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
static inline float __leap_bf2f_bits(unsigned short b) {
  unsigned x = (unsigned)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

#define LEAP_HALF_CLASS(T, RAW, TOBITS, TOF)                                                            \
  struct __attribute__((aligned(2))) T {                                                              \
    unsigned short __x;                                                                               \
    T() = default;                                                                                    \
    constexpr T(const RAW& r) : __x(r.x) {}                                                           \
    T(float f) : __x(TOBITS(f)) {}                                                                    \
    T(double f) : __x(TOBITS(float(f))) {}                                                            \
    T(short v) : __x(TOBITS(float(v))) {}                                                             \
    T(unsigned short v) : __x(TOBITS(float(v))) {}                                                    \
    T(int v) : __x(TOBITS(float(v))) {}                                                               \
    T(unsigned int v) : __x(TOBITS(float(v))) {}                                                      \
    T(long v) : __x(TOBITS(float(v))) {}                                                              \
    T(unsigned long v) : __x(TOBITS(float(v))) {}                                                     \
    T(long long v) : __x(TOBITS(float(v))) {}                                                         \
    T(unsigned long long v) : __x(TOBITS(float(v))) {}                                                \
    T& operator=(const RAW& r) { __x = r.x; return *this; }                                           \
    operator RAW() const { return RAW{__x}; }                                                         \
    operator float() const { return TOF(__x); }                                                       \
    explicit operator bool() const { return (__x & 0x7FFFu) != 0; }                                   \
    operator signed char() const { return (signed char)TOF(__x); }                                    \
    operator unsigned char() const { return (unsigned char)TOF(__x); }                                \
    operator short() const { return (short)TOF(__x); }                                                \
    operator unsigned short() const { return (unsigned short)TOF(__x); }                              \
    operator int() const { return (int)TOF(__x); }                                                    \
    operator unsigned int() const { return (unsigned int)TOF(__x); }                                  \
    operator long long() const { return (long long)TOF(__x); }                                        \
    operator unsigned long long() const { return (unsigned long long)TOF(__x); }                      \
  };                                                                                                  \
  static inline T operator+(const T& a, const T& b) { return T(float(a) + float(b)); }              \
  static inline T operator-(const T& a, const T& b) { return T(float(a) - float(b)); }              \
  static inline T operator*(const T& a, const T& b) { return T(float(a) * float(b)); }              \
  static inline T operator/(const T& a, const T& b) { return T(float(a) / float(b)); }              \
  static inline T& operator+=(T& a, const T& b) { return a = a + b; }                                \
  static inline T& operator-=(T& a, const T& b) { return a = a - b; }                                \
  static inline T& operator*=(T& a, const T& b) { return a = a * b; }                                \
  static inline T& operator/=(T& a, const T& b) { return a = a / b; }                                \
  static inline T& operator++(T& a) { return a = a + T(1.0f); }                                      \
  static inline T& operator--(T& a) { return a = a - T(1.0f); }                                      \
  static inline T operator++(T& a, int) { T o = a; ++a; return o; }                                  \
  static inline T operator--(T& a, int) { T o = a; --a; return o; }                                  \
  static inline T operator+(const T& a) { return a; }                                                \
  static inline T operator-(const T& a) { T r; r.__x = (unsigned short)(a.__x ^ 0x8000u); return r; } \
  static inline bool operator==(const T& a, const T& b) { return float(a) == float(b); }             \
  static inline bool operator!=(const T& a, const T& b) { return float(a) != float(b); }             \
  static inline bool operator<(const T& a, const T& b) { return float(a) < float(b); }               \
  static inline bool operator>(const T& a, const T& b) { return float(a) > float(b); }               \
  static inline bool operator<=(const T& a, const T& b) { return float(a) <= float(b); }             \
  static inline bool operator>=(const T& a, const T& b) { return float(a) >= float(b); }

LEAP_HALF_CLASS(__half, __half_raw, __leap_f2h_bits, __leap_h2f_bits)
LEAP_HALF_CLASS(__nv_bfloat16, __nv_bfloat16_raw, __leap_f2bf_bits, __leap_bf2f_bits)
#undef LEAP_HALF_CLASS
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

struct __attribute__((aligned(4))) __half2 {
  __half x, y;
  __half2() = default;
  constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
  __half2(const __half2_raw& r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
  operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
  __nv_bfloat162() = default;
  constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
  __nv_bfloat162(const __nv_bfloat162_raw& r) : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
  operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

// --- conversions and intrinsics, generated for both types -----------------------------------
#define LEAP_HALF_API(T, T2, P, F2T, T2F, F22T2, T22F2, FLOATS2)                                      \
  static inline T F2T(float f) { return T(f); }                                                        \
  static inline T F2T##_rn(float f) { return T(f); }                                                   \
  static inline T F2T##_rz(float f) { return T(f); }                                                   \
  static inline T F2T##_rd(float f) { return T(f); }                                                   \
  static inline T F2T##_ru(float f) { return T(f); }                                                   \
  static inline float T2F(T h) { return float(h); }                                                    \
  static inline T2 F22T2(float2 f) { return T2(T(f.x), T(f.y)); }                                      \
  static inline float2 T22F2(T2 h) { return make_float2(float(h.x), float(h.y)); }                     \
  static inline T2 FLOATS2(float a, float b) { return T2(T(a), T(b)); }                                \
  static inline T P##add(T a, T b) { return a + b; }                                                   \
  static inline T P##sub(T a, T b) { return a - b; }                                                   \
  static inline T P##mul(T a, T b) { return a * b; }                                                   \
  static inline T P##div(T a, T b) { return a / b; }                                                   \
  static inline T P##add_sat(T a, T b) { return T(__saturatef(float(a) + float(b))); }                 \
  static inline T P##mul_sat(T a, T b) { return T(__saturatef(float(a) * float(b))); }                 \
  static inline T P##fma(T a, T b, T c) { return T(fmaf(float(a), float(b), float(c))); }              \
  static inline T P##fma_sat(T a, T b, T c) { return T(__saturatef(fmaf(float(a), float(b), float(c)))); } \
  static inline T P##fma_relu(T a, T b, T c) { float r = fmaf(float(a), float(b), float(c)); return T(r < 0 ? 0.0f : r); } \
  static inline T P##neg(T a) { return -a; }                                                           \
  static inline T P##abs(T a) { T r = a; r.__x &= 0x7FFFu; return r; }                                \
  static inline T P##max(T a, T b) { return T(fmaxf(float(a), float(b))); }                            \
  static inline T P##min(T a, T b) { return T(fminf(float(a), float(b))); }                            \
  static inline T P##max_nan(T a, T b) { return (a != a || b != b) ? T(NAN) : P##max(a, b); }         \
  static inline T P##min_nan(T a, T b) { return (a != a || b != b) ? T(NAN) : P##min(a, b); }         \
  static inline bool P##eq(T a, T b) { return a == b; }                                                \
  static inline bool P##ne(T a, T b) { return a != b; }                                                \
  static inline bool P##lt(T a, T b) { return a < b; }                                                 \
  static inline bool P##le(T a, T b) { return a <= b; }                                                \
  static inline bool P##gt(T a, T b) { return a > b; }                                                 \
  static inline bool P##ge(T a, T b) { return a >= b; }                                                \
  static inline bool P##isnan(T a) { return float(a) != float(a); }                                    \
  static inline int P##isinf(T a) { float f = float(a); return std::isinf(f) ? (f > 0 ? 1 : -1) : 0; } \
  static inline T2 P##add2(T2 a, T2 b) { return T2(a.x + b.x, a.y + b.y); }                            \
  static inline T2 P##sub2(T2 a, T2 b) { return T2(a.x - b.x, a.y - b.y); }                            \
  static inline T2 P##mul2(T2 a, T2 b) { return T2(a.x * b.x, a.y * b.y); }                            \
  static inline T2 P##div2(T2 a, T2 b) { return T2(a.x / b.x, a.y / b.y); }                            \
  static inline T2 P##fma2(T2 a, T2 b, T2 c) { return T2(P##fma(a.x, b.x, c.x), P##fma(a.y, b.y, c.y)); } \
  static inline T2 P##neg2(T2 a) { return T2(-a.x, -a.y); }                                            \
  static inline T2 P##abs2(T2 a) { return T2(P##abs(a.x), P##abs(a.y)); }                             \
  static inline T2 P##max2(T2 a, T2 b) { return T2(P##max(a.x, b.x), P##max(a.y, b.y)); }              \
  static inline T2 P##min2(T2 a, T2 b) { return T2(P##min(a.x, b.x), P##min(a.y, b.y)); }              \
  static inline T2 operator+(const T2& a, const T2& b) { return P##add2(a, b); }                       \
  static inline T2 operator-(const T2& a, const T2& b) { return P##sub2(a, b); }                       \
  static inline T2 operator*(const T2& a, const T2& b) { return P##mul2(a, b); }                       \
  static inline T2 operator/(const T2& a, const T2& b) { return P##div2(a, b); }                       \
  static inline T2& operator+=(T2& a, const T2& b) { return a = a + b; }                               \
  static inline T2& operator-=(T2& a, const T2& b) { return a = a - b; }                               \
  static inline T2& operator*=(T2& a, const T2& b) { return a = a * b; }                               \
  static inline T2& operator/=(T2& a, const T2& b) { return a = a / b; }                               \
  static inline T2 operator-(const T2& a) { return P##neg2(a); }                                       \
  static inline T2 operator+(const T2& a) { return a; }                                                \
  static inline bool operator==(const T2& a, const T2& b) { return a.x == b.x && a.y == b.y; }         \
  static inline bool operator!=(const T2& a, const T2& b) { return !(a == b); }                        \
  static inline T hsqrt(T a) { return T(sqrtf(float(a))); }                                            \
  static inline T hrsqrt(T a) { return T(1.0f / sqrtf(float(a))); }                                    \
  static inline T hrcp(T a) { return T(1.0f / float(a)); }                                             \
  static inline T hexp(T a) { return T(expf(float(a))); }                                              \
  static inline T hexp2(T a) { return T(exp2f(float(a))); }                                            \
  static inline T hexp10(T a) { return T(exp10f(float(a))); }                                          \
  static inline T hlog(T a) { return T(logf(float(a))); }                                              \
  static inline T hlog2(T a) { return T(log2f(float(a))); }                                            \
  static inline T hlog10(T a) { return T(log10f(float(a))); }                                          \
  static inline T hsin(T a) { return T(sinf(float(a))); }                                              \
  static inline T hcos(T a) { return T(cosf(float(a))); }                                              \
  static inline T htanh(T a) { return T(tanhf(float(a))); }                                            \
  static inline T htanh_approx(T a) { return T(tanhf(float(a))); }                                    \
  static inline T hceil(T a) { return T(ceilf(float(a))); }                                            \
  static inline T hfloor(T a) { return T(floorf(float(a))); }                                          \
  static inline T htrunc(T a) { return T(truncf(float(a))); }                                          \
  static inline T hrint(T a) { return T(rintf(float(a))); }                                            \
  static inline T2 h2sqrt(T2 a) { return T2(hsqrt(a.x), hsqrt(a.y)); }                                 \
  static inline T2 h2rsqrt(T2 a) { return T2(hrsqrt(a.x), hrsqrt(a.y)); }                              \
  static inline T2 h2exp(T2 a) { return T2(hexp(a.x), hexp(a.y)); }                                    \
  static inline T2 h2log(T2 a) { return T2(hlog(a.x), hlog(a.y)); }                                    \
  static inline T2 h2rcp(T2 a) { return T2(hrcp(a.x), hrcp(a.y)); }                                    \
  static inline T2 h2tanh(T2 a) { return T2(htanh(a.x), htanh(a.y)); }                                 \
  static inline T __ldg(const T* p) { return *p; }                                                     \
  static inline T2 __ldg(const T2* p) { return *p; }                                                   \
  static inline T atomicAdd(T* a, T v) {                                                               \
    unsigned short old = __atomic_load_n(&a->__x, __ATOMIC_RELAXED);                                   \
    for (;;) {                                                                                         \
      T o; o.__x = old;                                                                                \
      T n = o + v;                                                                                     \
      if (__atomic_compare_exchange_n(&a->__x, &old, n.__x, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o; \
    }                                                                                                  \
  }                                                                                                    \
  static inline T2 atomicAdd(T2* a, T2 v) {                                                            \
    unsigned* ua = reinterpret_cast<unsigned*>(a);                                                     \
    unsigned old = __atomic_load_n(ua, __ATOMIC_RELAXED);                                              \
    for (;;) {                                                                                         \
      T2 o; memcpy(&o, &old, 4);                                                                       \
      T2 n = o + v; unsigned nu; memcpy(&nu, &n, 4);                                                   \
      if (__atomic_compare_exchange_n(ua, &old, nu, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o; \
    }                                                                                                  \
  }

LEAP_HALF_API(__half, __half2, __h, __float2half, __half2float, __float22half2_rn, __half22float2,
              __floats2half2_rn)
LEAP_HALF_API(__nv_bfloat16, __nv_bfloat162, __h, __float2bfloat16, __bfloat162float, __float22bfloat162_rn,
              __bfloat1622float2, __floats2bfloat162_rn)
#undef LEAP_HALF_API

static inline __half __double2half(double d) { return __half(float(d)); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(float(d)); }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(__nv_bfloat16(f), __nv_bfloat16(f)); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
static inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
static inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __half __low2half(__half2 a) { return a.x; }
static inline __half __high2half(__half2 a) { return a.y; }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) { return a.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) { return a.y; }
static inline float __low2float(__half2 a) { return float(a.x); }
static inline float __high2float(__half2 a) { return float(a.y); }
static inline float __low2float(__nv_bfloat162 a) { return float(a.x); }
static inline float __high2float(__nv_bfloat162 a) { return float(a.y); }
static inline __half2 __lowhigh2highlow(__half2 a) { return __half2(a.y, a.x); }
static inline __nv_bfloat162 __lowhigh2highlow(__nv_bfloat162 a) { return __nv_bfloat162(a.y, a.x); }
static inline __half __ushort_as_half(unsigned short v) { return __half(__half_raw{v}); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __short_as_half(short v) { return __half(__half_raw{(unsigned short)v}); }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v) { return __nv_bfloat16(__nv_bfloat16_raw{v}); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __short_as_bfloat16(short v) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)v}); }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
#define LEAP_INTCONV(T, P, SUF)                                                     \
  static inline int P##2int_##SUF(T h) { return (int)LEAP_RND_##SUF(float(h)); }  \
  static inline unsigned P##2uint_##SUF(T h) { return (unsigned)LEAP_RND_##SUF(float(h)); } \
  static inline short P##2short_##SUF(T h) { return (short)LEAP_RND_##SUF(float(h)); } \
  static inline unsigned short P##2ushort_##SUF(T h) { return (unsigned short)LEAP_RND_##SUF(float(h)); } \
  static inline long long P##2ll_##SUF(T h) { return (long long)LEAP_RND_##SUF(float(h)); } \
  static inline unsigned long long P##2ull_##SUF(T h) { return (unsigned long long)LEAP_RND_##SUF(float(h)); }
#define LEAP_RND_rn nearbyintf
#define LEAP_RND_rz truncf
#define LEAP_RND_rd floorf
#define LEAP_RND_ru ceilf
LEAP_INTCONV(__half, __half, rn) LEAP_INTCONV(__half, __half, rz) LEAP_INTCONV(__half, __half, rd)
LEAP_INTCONV(__half, __half, ru)
LEAP_INTCONV(__nv_bfloat16, __bfloat16, rn) LEAP_INTCONV(__nv_bfloat16, __bfloat16, rz)
LEAP_INTCONV(__nv_bfloat16, __bfloat16, rd) LEAP_INTCONV(__nv_bfloat16, __bfloat16, ru)
#undef LEAP_INTCONV
#define LEAP_TOHALF(T, P, SRC, NAME)                                   \
  static inline T P##NAME##_rn(SRC v) { return T(float(v)); }         \
  static inline T P##NAME##_rz(SRC v) { return T(float(v)); }         \
  static inline T P##NAME##_rd(SRC v) { return T(float(v)); }         \
  static inline T P##NAME##_ru(SRC v) { return T(float(v)); }
LEAP_TOHALF(__half, __int, int, 2half)
LEAP_TOHALF(__half, __uint, unsigned, 2half)
LEAP_TOHALF(__half, __short, short, 2half)
LEAP_TOHALF(__half, __ushort, unsigned short, 2half)
LEAP_TOHALF(__half, __ll, long long, 2half)
LEAP_TOHALF(__half, __ull, unsigned long long, 2half)
LEAP_TOHALF(__nv_bfloat16, __int, int, 2bfloat16)
LEAP_TOHALF(__nv_bfloat16, __uint, unsigned, 2bfloat16)
LEAP_TOHALF(__nv_bfloat16, __short, short, 2bfloat16)
LEAP_TOHALF(__nv_bfloat16, __ushort, unsigned short, 2bfloat16)
LEAP_TOHALF(__nv_bfloat16, __ll, long long, 2bfloat16)
LEAP_TOHALF(__nv_bfloat16, __ull, unsigned long long, 2bfloat16)
#undef LEAP_TOHALF
static inline __nv_bfloat16 __half2bfloat16(__half h) { return __nv_bfloat16(float(h)); }
static inline __half __bfloat162half(__nv_bfloat16 h) { return __half(float(h)); }

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3C00U)
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)

// shuffles of the 16-bit types move their bits
#endif  // LEAP_CUDA_HALF_H
