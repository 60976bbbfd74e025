// Copyright kvserve authors. Timed encode/decode round trips and the memcpy
// yardstick, shared by `kvserve eval` and `kvserve bench`.
#ifndef KVSERVE_TOOLS_KVSERVE_MEASURE_H_
#define KVSERVE_TOOLS_KVSERVE_MEASURE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

namespace kvserve::cli {

struct MeasureOptions {
  int threads = 0;  // encoder/decoder threads (0 = hardware)
  int repeat = 3;   // timings are the best of `repeat` runs
  const HeadScores* head_scores = nullptr;
  // Called with a short phase description ("encode 2/3").
  std::function<void(const std::string&)> progress;
};

struct CodecRun {
  uint64_t input_bytes = 0;    // logical bytes of the cache (the "V" of s_p)
  std::vector<uint8_t> frame;  // the encoded frame (all of it)
  FrameStats stats;
  double encode_seconds = 0;   // best of `repeat`
  double decode_seconds = 0;   // best of `repeat`
  KvCache decoded;             // the last decode's output
  std::vector<uint8_t> keep_mask;
};

// Encodes `kv` with `profile` `repeat` times, then decodes the frame
// `repeat` times into a preallocated cache. Contexts are created once,
// outside the timed region; output buffers are reused so page faults of the
// first run do not count. Returns the library's error unchanged.
Result<CodecRun> RunCodec(const KvView& kv, const Profile& profile, const MeasureOptions& options);

// Best-of-`repeat` seconds to memcpy `bytes` bytes from `src` into a
// prefaulted buffer, split evenly over `threads` threads.
double MeasureMemcpySeconds(const void* src, size_t bytes, int threads, int repeat);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_MEASURE_H_
