// Copyright kvserve authors. A fixed-size worker pool with a blocking
// ParallelFor, used to encode/decode chunks in parallel.
//
// Thread safety: ParallelFor may be called from several threads at once;
// each call blocks until its own iterations finish.
#ifndef KVSERVE_CORE_THREAD_POOL_H_
#define KVSERVE_CORE_THREAD_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace kvserve {

class ThreadPool {
 public:
  // `threads` workers; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }

  // Runs fn(i) for i in [0, n), spread over the workers and the calling
  // thread, and returns when all calls have returned. fn must not throw.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  // A process-wide pool sized to the hardware, created on first use.
  static ThreadPool& Shared();

 private:
  void WorkerLoop();
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::queue<std::function<void()>> tasks_;
  bool stop_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_THREAD_POOL_H_
