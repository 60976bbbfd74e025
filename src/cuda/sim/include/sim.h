// Copyright kvserve authors. A host simulator of the CUDA execution model
// for the kernels of src/cuda (built with -DKVSERVE_SIM, see
// src/cuda/sim/CMakeLists.txt): every thread of a block is a fiber
// (ucontext) on one OS thread, blocks of a grid run one after another, and
// __syncthreads, __syncwarp and the warp intrinsics are real barriers among
// the block's (the warp's) live fibers. Device memory is host memory; the
// runtime calls the kernels use are implemented on it. What it checks is the
// kernels' logic (indexing, barriers, warp cooperation, byte layout) on the
// real Encoder/Decoder code paths; what it cannot check is timing, the
// memory model beyond barriers, and the compiler's code generation.
#pragma once

#include <setjmp.h>
#include <ucontext.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__

struct SimDim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline SimDim3 threadIdx, blockIdx, blockDim{256, 1, 1}, gridDim{1, 1, 1};

struct uint2 {
  uint32_t x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float cospif(float x) { return std::cos(3.14159265358979323846f * x); }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

// ------------------------------------------------------------ the scheduler
namespace kvserve::sim {

// A fiber starts through makecontext/swapcontext and then switches with
// _setjmp/_longjmp, which (unlike swapcontext) make no system call.
struct Fiber {
  ucontext_t ctx;
  jmp_buf jump;
  bool started = false;
  std::vector<char> stack;
  bool done = false;
  int waiting = 0;  // 0 runnable, 1 block barrier, 2 warp barrier
};

struct Block {
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  jmp_buf scheduler_jump;
  int current = -1;
  int threads = 0;
  int live = 0, arrived = 0;
  int warp_live[32] = {}, warp_arrived[32] = {};
  uint64_t exchange[32][32] = {};
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
};

inline Block& TheBlock() {
  static Block b;
  return b;
}

inline void Yield() {
  Block& b = TheBlock();
  if (_setjmp(b.fibers[b.current].jump) == 0) _longjmp(b.scheduler_jump, 1);
}

inline void SetThread(int t) {
  threadIdx.x = static_cast<unsigned>(t) % blockDim.x;
  threadIdx.y = (static_cast<unsigned>(t) / blockDim.x) % blockDim.y;
  threadIdx.z = static_cast<unsigned>(t) / (blockDim.x * blockDim.y);
}

inline void BlockBarrier() {
  Block& b = TheBlock();
  if (++b.arrived == b.live) {
    b.arrived = 0;
    for (Fiber& f : b.fibers)
      if (f.waiting == 1) f.waiting = 0;
    return;
  }
  b.fibers[b.current].waiting = 1;
  Yield();
}

inline void WarpBarrier() {
  Block& b = TheBlock();
  const int w = b.current / 32;
  if (++b.warp_arrived[w] == b.warp_live[w]) {
    b.warp_arrived[w] = 0;
    for (int i = 32 * w; i < 32 * w + 32 && i < b.threads; ++i)
      if (b.fibers[i].waiting == 2) b.fibers[i].waiting = 0;
    return;
  }
  b.fibers[b.current].waiting = 2;
  Yield();
}

// A fiber left: barriers its block or warp waits on may now be complete.
inline void Exit() {
  Block& b = TheBlock();
  const int w = b.current / 32;
  b.fibers[b.current].done = true;
  --b.live;
  --b.warp_live[w];
  if (b.live > 0 && b.arrived == b.live) {
    b.arrived = 0;
    for (Fiber& f : b.fibers)
      if (f.waiting == 1) f.waiting = 0;
  }
  if (b.warp_live[w] > 0 && b.warp_arrived[w] == b.warp_live[w]) {
    b.warp_arrived[w] = 0;
    for (int i = 32 * w; i < 32 * w + 32 && i < b.threads; ++i)
      if (b.fibers[i].waiting == 2) b.fibers[i].waiting = 0;
  }
}

inline void Trampoline() {
  Block& b = TheBlock();
  b.body(b.body_arg);
  Exit();
  _longjmp(b.scheduler_jump, 1);
}

// Runs body(arg) as one block of `threads` fibers.
inline void RunBlock(int threads, void (*body)(void*), void* arg) {
  Block& b = TheBlock();
  constexpr size_t kStack = 256 * 1024;
  if (b.fibers.size() < static_cast<size_t>(threads)) b.fibers.resize(threads);
  b.threads = threads;
  b.live = threads;
  b.arrived = 0;
  for (int w = 0; w < 32; ++w) {
    const int first = 32 * w;
    b.warp_live[w] = first < threads ? (threads - first < 32 ? threads - first : 32) : 0;
    b.warp_arrived[w] = 0;
  }
  b.body = body;
  b.body_arg = arg;
  for (int t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    if (f.stack.empty()) f.stack.resize(kStack);
    f.done = false;
    f.waiting = 0;
    f.started = false;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, Trampoline, 0);
  }
  for (;;) {
    bool any = false, progressed = false;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[t];
      if (f.done) continue;
      any = true;
      if (f.waiting != 0) continue;
      b.current = t;
      SetThread(t);
      if (_setjmp(b.scheduler_jump) == 0) {
        if (!f.started) {
          f.started = true;
          swapcontext(&b.scheduler, &f.ctx);
        } else {
          _longjmp(f.jump, 1);
        }
      }
      progressed = true;
    }
    if (!any) break;
    if (!progressed) {
      std::fprintf(stderr, "kvserve sim: deadlock (a barrier not reached by every live thread)\n");
      std::abort();
    }
  }
}

// One grid at a time in the process: the simulated thread and block
// indices, shared memory and the block scheduler are process-wide, so grids
// launched from several host threads (a connector's sender and receiver)
// take turns.
inline std::recursive_mutex& GridMutex() {
  static std::recursive_mutex mu;
  return mu;
}

template <typename F>
void RunGrid(dim3 grid, dim3 block, F&& fn) {
  std::lock_guard<std::recursive_mutex> lock(GridMutex());
  gridDim = {grid.x, grid.y, grid.z};
  blockDim = {block.x, block.y, block.z};
  const int threads = static_cast<int>(block.x * block.y * block.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        RunBlock(threads, [](void* p) { (*static_cast<F*>(p))(); }, &fn);
      }
}

inline uint8_t* DynamicSmem() {
  static std::vector<uint8_t> buf(512 * 1024);
  return buf.data();
}

struct Launcher {
  dim3 grid, block;
  Launcher(dim3 g, dim3 b, size_t = 0, void* = nullptr) : grid(g), block(b) {}
  template <typename K>
  auto Bind(K kernel) {
    return [g = grid, b = block, kernel](auto... args) { RunGrid(g, b, [&] { kernel(args...); }); };
  }
};

template <typename T>
T Exchange(T v, int src) {
  Block& b = TheBlock();
  const int w = b.current / 32, lane = b.current % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  b.exchange[w][lane] = bits;
  WarpBarrier();
  const uint64_t o = b.exchange[w][src & 31];
  WarpBarrier();
  T r;
  std::memcpy(&r, &o, sizeof(T));
  return r;
}
inline unsigned Ballot(bool p) {
  Block& b = TheBlock();
  const int w = b.current / 32, lane = b.current % 32;
  b.exchange[w][lane] = p ? 1 : 0;
  WarpBarrier();
  unsigned m = 0;
  for (int l = 0; l < 32 && 32 * w + l < b.threads; ++l)
    if (!b.fibers[32 * w + l].done && b.exchange[w][l]) m |= 1u << l;
  WarpBarrier();
  return m;
}

}  // namespace kvserve::sim

// ------------------------------------------------------------ intrinsics
inline void __syncthreads() { kvserve::sim::BlockBarrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kvserve::sim::WarpBarrier(); }
inline void __threadfence_block() {}
inline void __threadfence() {}
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  return kvserve::sim::Exchange(v, src);
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int m) {
  return kvserve::sim::Exchange(v, (threadIdx.x & 31) ^ m);
}
template <class T>
T __shfl_up_sync(unsigned, T v, int d) {
  const int lane = threadIdx.x & 31;
  return kvserve::sim::Exchange(v, lane >= d ? lane - d : lane);
}
template <class T>
T __shfl_down_sync(unsigned, T v, int d) {
  const int lane = threadIdx.x & 31;
  return kvserve::sim::Exchange(v, lane + d < 32 ? lane + d : lane);
}
inline unsigned __ballot_sync(unsigned, bool p) { return kvserve::sim::Ballot(p); }
inline bool __all_sync(unsigned, bool p) {
  const unsigned m = kvserve::sim::Ballot(true);
  return kvserve::sim::Ballot(p) == m;
}
inline bool __any_sync(unsigned, bool p) { return kvserve::sim::Ballot(p) != 0; }
inline unsigned __match_any_sync(unsigned, unsigned v) {
  unsigned m = 0;
  for (int l = 0; l < 32; ++l)
    if (kvserve::sim::Exchange(v, l) == v) m |= 1u << l;
  return m;
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  unsigned s = 0;
  for (int l = 0; l < 32; ++l) s += kvserve::sim::Exchange(v, l);
  return s;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(v); }
inline int __clz(unsigned v) { return v == 0 ? 32 : __builtin_clz(v); }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) {
  const unsigned o = *p;
  if (o == c) *p = v;
  return o;
}
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) {
  const unsigned long long o = *p;
  if (o == c) *p = v;
  return o;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned o = *p;
  *p = o + v;
  return o;
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  const unsigned o = *p;
  *p = o | v;
  return o;
}
inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, unsigned s) {
  s &= 31;
  return s ? (lo >> s) | (hi << (32 - s)) : lo;
}
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32); }
inline uint64_t __umul64hi(uint64_t a, uint64_t b) { return static_cast<uint64_t>((unsigned __int128)a * b >> 64); }

// ------------------------------------------------------------ runtime API
typedef int cudaError_t;
enum : int { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
};
typedef CUevent_st* cudaEvent_t;
struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
};
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "simulated"; }
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
  *v = 2;  // two simulated multiprocessors: persistent grids get several blocks
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::snprintf(p->name, sizeof(p->name), "kvserve CUDA simulator");
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename T>
cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  if (n) std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr) {
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) { return cudaMemset(p, v, n); }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
enum : unsigned { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };
// Streams are synchronous here: every call has finished when it returns.
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
// No device memory limit here: what the process can allocate.
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t{1} << 40;
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}
template <class F>
inline cudaError_t cudaFuncSetAttribute(F, int, int) {
  return cudaSuccess;
}
