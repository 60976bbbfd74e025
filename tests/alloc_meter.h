// Copyright kvserve authors. Counts the heap bytes a piece of code
// allocates: include in exactly one .cc of a test binary (it replaces the
// global operator new and delete of that binary), then
//
//   AllocMeter meter;             // starts measuring
//   ... code under test ...
//   meter.peak_bytes()            // most bytes live at once since the start,
//                                 // counting only allocations made after it
//
// Allocations through malloc directly (C libraries) are not counted.
// Test-only; not thread-aware beyond the counters being atomic.
#ifndef KVSERVE_TESTS_ALLOC_METER_H_
#define KVSERVE_TESTS_ALLOC_METER_H_

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace kvserve::testing {

inline std::atomic<int64_t> g_live_bytes{0};
inline std::atomic<int64_t> g_peak_bytes{0};

inline void* CountedAlloc(size_t n, size_t align) {
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                               : std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) return nullptr;
  const int64_t live = g_live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p))) +
                       static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return p;
}

inline void CountedFree(void* p) {
  if (p == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
  std::free(p);
}

// Peak of live heap bytes above the level at construction.
class AllocMeter {
 public:
  AllocMeter() : base_(g_live_bytes.load()) { g_peak_bytes.store(base_); }
  int64_t peak_bytes() const { return g_peak_bytes.load() - base_; }

 private:
  int64_t base_;
};

}  // namespace kvserve::testing

void* operator new(size_t n) {
  void* p = kvserve::testing::CountedAlloc(n, 0);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  void* p = kvserve::testing::CountedAlloc(n, static_cast<size_t>(a));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return kvserve::testing::CountedAlloc(n, 0);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return kvserve::testing::CountedAlloc(n, 0);
}
void operator delete(void* p) noexcept { kvserve::testing::CountedFree(p); }
void operator delete[](void* p) noexcept { kvserve::testing::CountedFree(p); }
void operator delete(void* p, size_t) noexcept { kvserve::testing::CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { kvserve::testing::CountedFree(p); }
void operator delete(void* p, std::align_val_t) noexcept { kvserve::testing::CountedFree(p); }
void operator delete[](void* p, std::align_val_t) noexcept { kvserve::testing::CountedFree(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { kvserve::testing::CountedFree(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  kvserve::testing::CountedFree(p);
}

#endif  // KVSERVE_TESTS_ALLOC_METER_H_
