// LEAP CUDA-on-CPU runtime: grid execution, fibers, barriers, warp collectives, device printf.
//
// Compiled once per (compiler, flags) into an object file that is linked into every kernel module,
// so each module is self-contained (its own printf buffer, its own thread-local state).
// Threads of a block are fibers on one OS thread (hand-written x86-64 context switch); blocks of a
// grid run on worker threads. Only one block runs on an OS thread at a time, so `static
// thread_local` storage is per-block storage (that is how `__shared__` is implemented).
#include "leap_cuda_cpu.h"

#include <dlfcn.h>
#include <signal.h>
#include <setjmp.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define LEAP_ASAN 1
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#else
#define LEAP_ASAN 0
#endif

#define LEAP_EXPORT extern "C" __attribute__((visibility("default")))

__thread __LeapCtx __leap_ctx;

namespace {

// ---------------------------------------------------------------------------------------------
// Context switch. leap_switch(save, to): push callee-saved registers, store rsp in *save, load `to`,
// pop and return into the other context. A new fiber's stack is laid out so that the first switch
// "returns" into leap_fiber_entry with a call-aligned stack.
// ---------------------------------------------------------------------------------------------
#if defined(__x86_64__)
extern "C" void leap_switch(void** save, void* to);
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type leap_switch,@function\n"
    "leap_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size leap_switch, .-leap_switch\n");
#else
#error "the LEAP CPU runtime's fiber switch is written for x86-64"
#endif

enum FiberState { F_NEW, F_RUNNABLE, F_BARRIER, F_WARP, F_DONE };

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;  // base of the mapping (guard page first)
  int state = F_NEW;
  unsigned tid = 0;
  uint3 idx{0, 0, 0};
  int line = 0;  // where it waits
  int pred = 0;
  int result = 0;  // __syncthreads_count/and/or result
  // pending warp collective
  int wkind = 0;
  unsigned wmask = 0;
  int warg = 0;
  int wwidth = 32;
  unsigned long long wval = 0;
  unsigned long long wres = 0;
};

constexpr size_t kGuard = 4096;

size_t stack_bytes() {
  static size_t bytes = [] {
    const char* env = getenv("LEAP_CPU_STACK_KB");
    size_t kb = env ? strtoul(env, nullptr, 10) : 0;
    if (kb < 16) kb = LEAP_ASAN ? 256 : 64;
    return kb * 1024;
  }();
  return bytes;
}

struct Worker;
__thread Worker* tls_worker = nullptr;

struct Worker {
  // configuration of the running launch
  LeapLaunch* launch = nullptr;
  void (*thunk)(void**) = nullptr;
  void** args = nullptr;
  std::vector<Fiber> fibers;
  std::vector<char*> free_stacks;
  std::vector<char*> all_stacks;
  std::vector<unsigned> order;
  void* sched_sp = nullptr;
  Fiber* cur = nullptr;
  unsigned nthreads = 0;
  unsigned live = 0;
  int bar_count = 0;  // predicate sum of the barrier being filled
  bool failed = false;
  int fail_kind = 0;
  std::string fail_msg;
  std::mt19937_64 rng;
  char* smem = nullptr;
  size_t smem_cap = 0;
  // invalid memory accesses: the SIGSEGV handler jumps back to the block loop
  sigjmp_buf jb;
  volatile bool jb_armed = false;
  void* fault_addr = nullptr;
  void* fault_pc = nullptr;
  int fault_sig = 0;
  char* altstack = nullptr;
#if LEAP_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif

  ~Worker() {
    for (char* s : all_stacks) munmap(s, stack_bytes() + kGuard);
    free(smem);
    free(altstack);
  }

  char* get_stack() {
    if (!free_stacks.empty()) {
      char* s = free_stacks.back();
      free_stacks.pop_back();
      return s;
    }
    void* m = mmap(nullptr, stack_bytes() + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m, kGuard, PROT_NONE);  // overflow faults instead of corrupting a neighbour
    all_stacks.push_back(static_cast<char*>(m));
    return static_cast<char*>(m);
  }
};

[[noreturn]] void fiber_entry();

void switch_to_fiber(Worker* w, Fiber* f) {
  w->cur = f;
  __leap_ctx.tidx = f->idx;
#if LEAP_ASAN
  __sanitizer_start_switch_fiber(nullptr, f->stack + kGuard, stack_bytes());
#endif
  leap_switch(&w->sched_sp, f->sp);
#if LEAP_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  w->cur = nullptr;
}

// From a fiber back to the scheduler; returns when the scheduler resumes this fiber.
void yield_to_scheduler(Worker* w, Fiber* f) {
#if LEAP_ASAN
  __sanitizer_start_switch_fiber(nullptr, w->sched_bottom, w->sched_size);
#endif
  leap_switch(&f->sp, w->sched_sp);
#if LEAP_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

void start_fiber(Worker* w, Fiber* f) {
  f->stack = w->get_stack();
  if (!f->stack) {
    w->failed = true;
    w->fail_kind = LEAP_ERR_LAUNCH;
    w->fail_msg = "out of memory for thread stacks";
    return;
  }
  // colour the stack top by its address so the fibers' hot frames do not all fall in one cache set
  size_t colour = ((reinterpret_cast<uintptr_t>(f->stack) >> 16) * 7 % 61) * 64 + 64;
  uintptr_t top = reinterpret_cast<uintptr_t>(f->stack + kGuard + stack_bytes() - colour) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                            // fake return address of fiber_entry
  *--sp = reinterpret_cast<uint64_t>(&fiber_entry);     // `ret` target
  for (int i = 0; i < 6; ++i) *--sp = 0;                // rbp rbx r12 r13 r14 r15
  f->sp = sp;
  f->state = F_RUNNABLE;
}

void fail(Worker* w, int kind, const std::string& msg) {
  if (!w->failed) {
    w->failed = true;
    w->fail_kind = kind;
    w->fail_msg = msg;
  }
}

[[noreturn]] void fiber_entry() {
  Worker* w = tls_worker;
#if LEAP_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w->sched_bottom, &w->sched_size);
#endif
  w->thunk(w->args);
  Fiber* f = w->cur;
  f->state = F_DONE;
  yield_to_scheduler(w, f);
  __builtin_unreachable();
}

// Abort the running fiber: mark the block failed and never resume it.
[[noreturn]] void abort_fiber(int kind, const std::string& msg) {
  Worker* w = tls_worker;
  fail(w, kind, msg);
  Fiber* f = w->cur;
  f->state = F_DONE;
  yield_to_scheduler(w, f);
  __builtin_unreachable();
}

std::string thread_str(const Fiber& f) {
  char buf[64];
  snprintf(buf, sizeof buf, "(%u,%u,%u)", f.idx.x, f.idx.y, f.idx.z);
  return buf;
}

const char* warp_op_name(int kind) {
  switch (kind) {
    case LEAP_W_SYNC: return "__syncwarp";
    case LEAP_W_SHFL: return "__shfl_sync";
    case LEAP_W_UP: return "__shfl_up_sync";
    case LEAP_W_DOWN: return "__shfl_down_sync";
    case LEAP_W_XOR: return "__shfl_xor_sync";
    case LEAP_W_BALLOT: return "__ballot_sync";
    case LEAP_W_ANY: return "__any_sync";
    case LEAP_W_ALL: return "__all_sync";
    case LEAP_W_MATCH_ANY: return "__match_any_sync";
    case LEAP_W_REDUCE_ADD: return "__reduce_add_sync";
    case LEAP_W_REDUCE_MIN: return "__reduce_min_sync";
    case LEAP_W_REDUCE_MAX: return "__reduce_max_sync";
    case LEAP_W_REDUCE_AND: return "__reduce_and_sync";
    case LEAP_W_REDUCE_OR: return "__reduce_or_sync";
    case LEAP_W_REDUCE_XOR: return "__reduce_xor_sync";
    case LEAP_W_ACTIVEMASK: return "__activemask";
    default: return "warp operation";
  }
}

// Lanes of the warp holding fiber index `first` (linear thread id of lane 0).
struct WarpView {
  Fiber* lanes[32];
  unsigned count;
};

WarpView warp_of(Worker* w, unsigned linear) {
  WarpView v;
  unsigned base = linear & ~31u;
  v.count = std::min(32u, w->nthreads - base);
  for (unsigned i = 0; i < 32; ++i) v.lanes[i] = i < v.count ? &w->fibers[base + i] : nullptr;
  return v;
}

// Whether every lane of `mask` has arrived at a warp collective (or exited / does not exist).
bool group_ready(const WarpView& v, unsigned mask) {
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u) || l >= v.count) continue;
    int s = v.lanes[l]->state;
    if (s != F_WARP && s != F_DONE) return false;
  }
  return true;
}

// Complete the collective of the lanes in `mask`: compute each pending lane's result, wake it.
void complete_group(const WarpView& v, unsigned mask) {
  unsigned present = 0;  // lanes that contribute a value
  for (unsigned l = 0; l < v.count; ++l)
    if ((mask >> l & 1u) && v.lanes[l]->state == F_WARP) present |= 1u << l;
  for (unsigned l = 0; l < v.count; ++l) {
    if (!(present >> l & 1u)) continue;
    Fiber* f = v.lanes[l];
    unsigned long long r = f->wval;
    int width = f->wwidth <= 0 || f->wwidth > 32 ? 32 : f->wwidth;
    unsigned seg = l & ~unsigned(width - 1);
    int src = -1;
    switch (f->wkind) {
      case LEAP_W_SYNC: r = 0; break;
      case LEAP_W_SHFL: src = int(seg + (unsigned(f->warg) & unsigned(width - 1))); break;
      case LEAP_W_UP: src = int(l) - f->warg >= int(seg) ? int(l) - f->warg : -1; break;
      case LEAP_W_DOWN: src = int(l) + f->warg < int(seg) + width ? int(l) + f->warg : -1; break;
      case LEAP_W_XOR: {
        int s = int(l ^ unsigned(f->warg));
        src = s < int(seg) + width ? s : -1;
        break;
      }
      case LEAP_W_BALLOT:
      case LEAP_W_ANY:
      case LEAP_W_ALL:
      case LEAP_W_MATCH_ANY: {
        unsigned bits = 0, same = 0;
        for (unsigned j = 0; j < 32; ++j) {
          if (!(present >> j & 1u)) continue;
          if (v.lanes[j]->wval) bits |= 1u << j;
          if (v.lanes[j]->wval == f->wval) same |= 1u << j;
        }
        if (f->wkind == LEAP_W_BALLOT) r = bits;
        else if (f->wkind == LEAP_W_ANY) r = bits != 0;
        else if (f->wkind == LEAP_W_ALL) r = bits == present;
        else r = same;
        break;
      }
      case LEAP_W_ACTIVEMASK: r = present; break;
      default: {  // __reduce_*_sync on unsigned values (min/max signedness chosen by warg)
        unsigned long long acc = 0;
        bool first = true;
        for (unsigned j = 0; j < 32; ++j) {
          if (!(present >> j & 1u)) continue;
          unsigned long long x = v.lanes[j]->wval;
          if (first) { acc = x; first = false; continue; }
          switch (f->wkind) {
            case LEAP_W_REDUCE_ADD: acc = (unsigned)(acc + x); break;
            case LEAP_W_REDUCE_AND: acc &= x; break;
            case LEAP_W_REDUCE_OR: acc |= x; break;
            case LEAP_W_REDUCE_XOR: acc ^= x; break;
            case LEAP_W_REDUCE_MIN:
              acc = f->warg ? (unsigned)std::min(int(acc), int(x)) : std::min(acc, x); break;
            case LEAP_W_REDUCE_MAX:
              acc = f->warg ? (unsigned)std::max(int(acc), int(x)) : std::max(acc, x); break;
          }
        }
        r = acc;
      }
    }
    if (src >= 0) {
      // reading a lane that does not take part (exited, outside the mask) is undefined on a GPU;
      // here it yields the caller's own value
      r = (present >> src & 1u) ? v.lanes[src]->wval : f->wval;
    }
    f->wres = r;
  }
  for (unsigned l = 0; l < v.count; ++l)
    if (present >> l & 1u) v.lanes[l]->state = F_RUNNABLE;
}

void deadlock(Worker* w, const std::string& msg) { fail(w, LEAP_ERR_DEADLOCK, msg); }

std::string lanes_str(const std::vector<const Fiber*>& fs) {
  std::string s;
  size_t shown = 0;
  for (const Fiber* f : fs) {
    if (shown == 4) { s += ", ... (" + std::to_string(fs.size()) + " threads)"; break; }
    if (shown) s += ", ";
    s += thread_str(*f);
    ++shown;
  }
  return s;
}

// Every live fiber is blocked: complete what can complete, release a barrier, or report a deadlock.
void resolve(Worker* w) {
  {  // fast path: every live thread waits at the same __syncthreads
    int line = -1;
    bool simple = true;
    for (unsigned t = 0; t < w->nthreads && simple; ++t) {
      const Fiber& f = w->fibers[t];
      if (f.state == F_DONE) continue;
      if (f.state != F_BARRIER || (line >= 0 && f.line != line)) simple = false;
      line = f.line;
    }
    if (simple && line >= 0) {
      int count = w->bar_count;
      w->bar_count = 0;
      for (unsigned t = 0; t < w->nthreads; ++t) {
        Fiber& f = w->fibers[t];
        if (f.state == F_BARRIER) {
          f.result = count;
          f.state = F_RUNNABLE;
        }
      }
      return;
    }
  }
  bool progress = false;
  std::vector<const Fiber*> at_barrier, at_warp;
  for (unsigned t = 0; t < w->nthreads; ++t) {
    Fiber& f = w->fibers[t];
    if (f.state == F_WARP) {
      WarpView v = warp_of(w, t);
      unsigned mask = f.wmask | (1u << (t & 31));
      if (group_ready(v, mask)) {
        complete_group(v, mask);
        progress = true;
      } else {
        at_warp.push_back(&f);
      }
    } else if (f.state == F_BARRIER) {
      at_barrier.push_back(&f);
    }
  }
  if (progress) return;
  if (!at_warp.empty()) {
    const Fiber* f = at_warp.front();
    std::string msg = std::string("deadlock: ") + warp_op_name(f->wkind) + " at line " + std::to_string(f->line) +
                      " in thread " + thread_str(*f) + " waits for lanes of mask 0x";
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", f->wmask);
    msg += hex;
    if (!at_barrier.empty())
      msg += " that are waiting at __syncthreads (line " + std::to_string(at_barrier.front()->line) +
             ") instead; every lane named in the mask must reach the same warp operation";
    else
      msg += " that never reach it; every lane named in the mask must call the warp operation";
    deadlock(w, msg);
    return;
  }
  if (at_barrier.empty()) return;
  int line = at_barrier.front()->line;
  std::vector<const Fiber*> here, elsewhere;
  for (const Fiber* f : at_barrier) (f->line == line ? here : elsewhere).push_back(f);
  if (!elsewhere.empty()) {
    deadlock(w, "deadlock: __syncthreads() inside a divergent branch: threads " + lanes_str(here) +
                    " wait at the __syncthreads on line " + std::to_string(line) + " while threads " +
                    lanes_str(elsewhere) + " wait at the one on line " + std::to_string(elsewhere.front()->line) +
                    "; every thread of the block must reach the same __syncthreads (move it out of the if/loop)");
    return;
  }
  // all live threads wait at the same barrier (threads that returned count as arrived, as on a GPU)
  int count = w->bar_count;
  w->bar_count = 0;
  for (const Fiber* cf : at_barrier) {
    Fiber* f = const_cast<Fiber*>(cf);
    f->result = count;
    f->state = F_RUNNABLE;
  }
}

void run_block(Worker* w) {
  LeapLaunch* L = w->launch;
  unsigned bx = L->block[0], by = L->block[1];
  for (unsigned t = 0; t < w->nthreads; ++t) {
    Fiber& f = w->fibers[t];
    if (f.stack) w->free_stacks.push_back(f.stack);
    f = Fiber();
    f.tid = t;
    f.idx = uint3{t % bx, (t / bx) % by, t / (bx * by)};
  }
  w->live = w->nthreads;
  w->bar_count = 0;
  bool shuffle = L->shuffle != 0;
  while (w->live > 0 && !w->failed) {
    bool progress = false;
    if (shuffle) std::shuffle(w->order.begin(), w->order.end(), w->rng);
    for (unsigned i = 0; i < w->nthreads && !w->failed; ++i) {
      Fiber* f = &w->fibers[w->order[i]];
      if (f->state == F_NEW) {
        start_fiber(w, f);
        if (w->failed) break;
      }
      if (f->state != F_RUNNABLE) continue;
      switch_to_fiber(w, f);
      progress = true;
      if (f->state == F_DONE) {
        --w->live;
        w->free_stacks.push_back(f->stack);
        f->stack = nullptr;
      }
    }
    if (!progress && w->live > 0 && !w->failed) resolve(w);
  }
  if (w->failed) {  // abandon the block's fibers; their stacks are reused
    for (unsigned t = 0; t < w->nthreads; ++t) {
      Fiber& f = w->fibers[t];
      if (f.stack) { w->free_stacks.push_back(f.stack); f.stack = nullptr; }
    }
  }
}

thread_local Worker* tl_worker_cache = nullptr;

#if !LEAP_ASAN
// A bad access inside a kernel becomes an error of the launch instead of killing the process.
std::mutex sig_mu;
int sig_users = 0;
struct sigaction old_segv, old_bus;

void fault_handler(int sig, siginfo_t* si, void* uc) {
  Worker* w = tls_worker;
  if (w && w->jb_armed && w->cur) {
    w->jb_armed = false;
    w->fault_addr = si->si_addr;
    w->fault_pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP]);
    w->fault_sig = sig;
    siglongjmp(w->jb, 1);
  }
  // not a kernel's fault: hand it to whoever handled it before (the faulting instruction reruns)
  sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, nullptr);
}

void install_fault_handler() {
  std::lock_guard<std::mutex> lock(sig_mu);
  if (sig_users++ == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
  }
}

void remove_fault_handler() {
  std::lock_guard<std::mutex> lock(sig_mu);
  if (--sig_users == 0) {
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
  }
}
#endif

struct GridState {
  std::atomic<unsigned long long> next{0};
  std::atomic<int> failed{0};
  std::mutex mu;
  int kind = 0;
  std::string msg;
};

void worker_main(LeapLaunch* L, void (*thunk)(void**), void** args, GridState* g, unsigned wid) {
  if (!tl_worker_cache) tl_worker_cache = new Worker();  // kept for the OS thread's life
  Worker* w = tl_worker_cache;
  tls_worker = w;
#if !LEAP_ASAN
  constexpr size_t kAltStack = 64 * 1024;
  if (!w->altstack) w->altstack = static_cast<char*>(malloc(kAltStack));
  stack_t alt, old_alt;
  alt.ss_sp = w->altstack;
  alt.ss_size = kAltStack;
  alt.ss_flags = 0;
  sigaltstack(&alt, &old_alt);
#endif
  w->launch = L;
  w->thunk = thunk;
  w->args = args;
  w->failed = false;
  w->fail_msg.clear();
  w->nthreads = L->block[0] * L->block[1] * L->block[2];
  w->fibers.assign(w->nthreads, Fiber());
  w->order.resize(w->nthreads);
  for (unsigned i = 0; i < w->nthreads; ++i) w->order[i] = i;
  w->rng.seed(L->seed * 0x9E3779B97F4A7C15ull + wid);
  size_t need = std::max<size_t>(L->shmem, 16);
  if (w->smem_cap < need) {
    free(w->smem);
    w->smem = static_cast<char*>(aligned_alloc(128, (need + 127) & ~size_t(127)));
    w->smem_cap = need;
  }
  // shared memory starts as garbage on a GPU: NaN / -1 bytes make reads of unwritten slots visible
  memset(w->smem, 0xFF, need);
  __leap_ctx.bdim = uint3{L->block[0], L->block[1], L->block[2]};
  __leap_ctx.gdim = uint3{L->grid[0], L->grid[1], L->grid[2]};
  __leap_ctx.dyn_smem = w->smem;
  unsigned long long gx = L->grid[0], gy = L->grid[1];
  unsigned long long nblocks = gx * gy * L->grid[2];
  while (!g->failed.load(std::memory_order_relaxed)) {
    unsigned long long b = g->next.fetch_add(1);
    if (b >= nblocks) break;
    __leap_ctx.bidx = uint3{unsigned(b % gx), unsigned((b / gx) % gy), unsigned(b / (gx * gy))};
#if LEAP_ASAN
    run_block(w);
#else
    if (sigsetjmp(w->jb, 1) == 0) {
      w->jb_armed = true;
      run_block(w);
      w->jb_armed = false;
    } else {
      char buf[256];
      Fiber* f = w->cur;
      Dl_info info;
      unsigned long long off = 0;
      if (dladdr(w->fault_pc, &info) && info.dli_fbase)
        off = (unsigned long long)((char*)w->fault_pc - (char*)info.dli_fbase);
      char* a = static_cast<char*>(w->fault_addr);
      int kind = LEAP_ERR_MEMORY;
      if (f && f->stack && a >= f->stack && a < f->stack + kGuard + 4096) {
        kind = LEAP_ERR_KERNEL;
        snprintf(buf, sizeof buf, "stack overflow of a thread (deep recursion or local arrays over %zu KiB; set "
                 "LEAP_CPU_STACK_KB) in thread %s [pc +0x%llx]", stack_bytes() / 1024, thread_str(*f).c_str(), off);
      } else {
        snprintf(buf, sizeof buf, "invalid memory %s at address %p in thread %s [pc +0x%llx]",
                 w->fault_sig == SIGBUS ? "access (bus error)" : "access (segmentation fault)", w->fault_addr,
                 f ? thread_str(*f).c_str() : "?", off);
      }
      w->cur = nullptr;
      w->failed = false;
      fail(w, kind, buf);
      for (unsigned t = 0; t < w->nthreads; ++t) {
        Fiber& ff = w->fibers[t];
        if (ff.stack) { w->free_stacks.push_back(ff.stack); ff.stack = nullptr; }
      }
    }
#endif
    if (w->failed) {
      std::lock_guard<std::mutex> lock(g->mu);
      if (!g->failed.load()) {
        g->kind = w->fail_kind;
        char where[96];
        snprintf(where, sizeof where, " [block (%u,%u,%u)]", __leap_ctx.bidx.x, __leap_ctx.bidx.y,
                 __leap_ctx.bidx.z);
        g->msg = w->fail_msg + where;
        g->failed.store(1);
      }
      break;
    }
  }
  // drop fibers of a failed block so the next launch starts clean
  for (Fiber& f : w->fibers)
    if (f.stack) { w->free_stacks.push_back(f.stack); f.stack = nullptr; }
  tls_worker = nullptr;
#if !LEAP_ASAN
  if (old_alt.ss_flags & SS_DISABLE) {
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
  } else {
    sigaltstack(&old_alt, nullptr);
  }
#endif
  if (wid != 0) {  // a thread of this launch only: free its stacks
    delete w;
    tl_worker_cache = nullptr;
  }
}

// device printf buffer (CUDA's default FIFO is 1 MiB; output past it is dropped)
std::mutex out_mu;
std::string out_buf;
size_t out_dropped = 0;
constexpr size_t kOutCap = 1 << 20;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Device-side entry points (declared in leap_cuda_cpu.h)
// ---------------------------------------------------------------------------------------------
int __leap_sync_block(int pred, int line) {
  Worker* w = tls_worker;
  Fiber* f = w->cur;
  f->line = line;
  w->bar_count += pred ? 1 : 0;
  f->state = F_BARRIER;
  yield_to_scheduler(w, f);
  return f->result;
}

unsigned long long __leap_warp_op(int kind, unsigned mask, unsigned long long val, int arg, int width, int line) {
  Worker* w = tls_worker;
  Fiber* f = w->cur;
  unsigned lane = f->tid & 31;
  f->wkind = kind;
  f->wmask = mask | (1u << lane);
  f->wval = val;
  f->warg = arg;
  f->wwidth = width;
  f->line = line;
  f->state = F_WARP;
  if (kind == LEAP_W_ACTIVEMASK) {
    // the lanes that are converged with this one: on this runtime, the lanes that have not exited
    WarpView v = warp_of(w, f->tid);
    unsigned m = 0;
    for (unsigned l = 0; l < v.count; ++l)
      if (v.lanes[l]->state != F_DONE) m |= 1u << l;
    f->state = F_RUNNABLE;
    return m;
  }
  WarpView v = warp_of(w, f->tid);
  if (group_ready(v, f->wmask)) {
    complete_group(v, f->wmask);
    return f->wres;
  }
  yield_to_scheduler(w, f);
  return f->wres;
}

void __leap_trap(int kind, const char* msg) { abort_fiber(kind, msg); }

int __leap_printf(const char* fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return n;
  std::string text;
  if (size_t(n) < sizeof small) {
    text.assign(small, size_t(n));
  } else {
    text.resize(size_t(n) + 1);
    va_start(ap, fmt);
    vsnprintf(&text[0], text.size(), fmt, ap);
    va_end(ap);
    text.resize(size_t(n));
  }
  std::lock_guard<std::mutex> lock(out_mu);
  if (out_buf.size() + text.size() > kOutCap) {
    out_dropped += text.size();
  } else {
    out_buf += text;
  }
  return n;
}

// device-side assert(): a kernel error, as "device-side assert triggered" on a GPU
extern "C" __attribute__((visibility("hidden"))) void __assert_fail(const char* expr, const char* file, unsigned line, const char* func) noexcept {
  char buf[512];
  snprintf(buf, sizeof buf, "device-side assert triggered: %s:%u: %s: Assertion `%s` failed", file, line, func, expr);
  if (tls_worker && tls_worker->cur) abort_fiber(LEAP_ERR_KERNEL, buf);
  fprintf(stderr, "%s\n", buf);
  abort();
}

// ---------------------------------------------------------------------------------------------
// Host-side entry points (called through ctypes)
// ---------------------------------------------------------------------------------------------
int __leap_run_grid(LeapLaunch* L, void (*thunk)(void**), void** args) {
  L->status = 0;
  L->message[0] = 0;
  unsigned long long nblocks = (unsigned long long)L->grid[0] * L->grid[1] * L->grid[2];
  unsigned workers = L->workers > 0 ? unsigned(L->workers) : std::max(1u, std::thread::hardware_concurrency());
  if (nblocks < workers) workers = unsigned(nblocks);
  GridState g;
#if !LEAP_ASAN
  install_fault_handler();
#endif
  std::vector<std::thread> threads;
  try {
    for (unsigned i = 1; i < workers; ++i) threads.emplace_back(worker_main, L, thunk, args, &g, i);
  } catch (...) {
    // fewer OS threads than asked: the caller's thread does the rest
  }
  worker_main(L, thunk, args, &g, 0);
  for (auto& t : threads) t.join();
#if !LEAP_ASAN
  remove_fault_handler();
#endif
  if (g.failed.load()) {
    L->status = g.kind ? g.kind : LEAP_ERR_KERNEL;
    snprintf(L->message, sizeof L->message, "%s", g.msg.c_str());
  }
  return L->status;
}

LEAP_EXPORT size_t leap_output_take(char* dst, size_t cap) {
  std::lock_guard<std::mutex> lock(out_mu);
  if (!dst) return out_buf.size();
  size_t n = std::min(cap, out_buf.size());
  memcpy(dst, out_buf.data(), n);
  out_buf.erase(0, n);
  return n;
}

LEAP_EXPORT size_t leap_output_dropped() {
  std::lock_guard<std::mutex> lock(out_mu);
  size_t d = out_dropped;
  out_dropped = 0;
  return d;
}

LEAP_EXPORT int leap_runtime_version() { return LEAP_RUNTIME_VERSION; }
