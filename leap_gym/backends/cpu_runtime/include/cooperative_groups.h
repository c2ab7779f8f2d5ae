// LEAP CPU runtime: the block-level part of cooperative groups (thread_block, tiled partitions of a
// warp, reduce). Grid-wide groups need a cooperative launch and are not available.
#pragma once

namespace cooperative_groups {

struct thread_block {
  static void sync(int line = __builtin_LINE()) { __syncthreads(line); }
  static unsigned thread_rank() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
  static unsigned size() { return blockDim.x * blockDim.y * blockDim.z; }
  static unsigned num_threads() { return size(); }
  static dim3 group_index() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  static dim3 thread_index() { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  static dim3 group_dim() { return dim3(blockDim.x, blockDim.y, blockDim.z); }
  static dim3 dim_threads() { return group_dim(); }
};
static inline thread_block this_thread_block() { return thread_block(); }
static inline void sync(const thread_block&, int line = __builtin_LINE()) { __syncthreads(line); }

template <unsigned N>
struct thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tile sizes are powers of two up to 32");
  unsigned mask() const {
    unsigned lane = thread_block::thread_rank() & 31u;
    unsigned base = lane & ~(N - 1);
    return (N == 32 ? 0xffffffffu : ((1u << N) - 1u)) << base;
  }
  void sync(int line = __builtin_LINE()) const { __syncwarp(mask(), line); }
  unsigned thread_rank() const { return thread_block::thread_rank() & (N - 1); }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  unsigned meta_group_rank() const { return thread_block::thread_rank() / N; }
  unsigned meta_group_size() const { return (thread_block::size() + N - 1) / N; }
  template <class T> T shfl(T v, int src, int line = __builtin_LINE()) const { return __shfl_sync(mask(), v, src, N, line); }
  template <class T> T shfl_down(T v, unsigned d, int line = __builtin_LINE()) const {
    return __shfl_down_sync(mask(), v, d, N, line);
  }
  template <class T> T shfl_up(T v, unsigned d, int line = __builtin_LINE()) const {
    return __shfl_up_sync(mask(), v, d, N, line);
  }
  template <class T> T shfl_xor(T v, int m, int line = __builtin_LINE()) const {
    return __shfl_xor_sync(mask(), v, m, N, line);
  }
  unsigned ballot(int p, int line = __builtin_LINE()) const {
    return (__ballot_sync(mask(), p, line) >> ((thread_block::thread_rank() & 31u) & ~(N - 1))) &
           (N == 32 ? 0xffffffffu : ((1u << N) - 1u));
  }
  int any(int p, int line = __builtin_LINE()) const { return __any_sync(mask(), p, line); }
  int all(int p, int line = __builtin_LINE()) const { return __all_sync(mask(), p, line); }
};
template <unsigned N, class Parent>
static inline thread_block_tile<N> tiled_partition(const Parent&) { return thread_block_tile<N>(); }
static inline void sync(const thread_block_tile<32>& t, int line = __builtin_LINE()) { t.sync(line); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

template <unsigned N, class T, class Op>
static inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned d = N / 2; d > 0; d >>= 1) v = op(v, g.shfl_xor(v, int(d)));
  return v;
}
template <unsigned N, class T, class Op>
static inline T inclusive_scan(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned d = 1; d < N; d <<= 1) {
    T o = g.shfl_up(v, d);
    if (g.thread_rank() >= d) v = op(v, o);
  }
  return v;
}

}  // namespace cooperative_groups
