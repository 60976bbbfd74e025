// Copyright kvserve authors. `kvserve compress` and `kvserve decompress`: a
// KV file to a frame file and back, with what they measured. Not part of
// the installed library.
#ifndef KVSERVE_EXPERIMENTS_FRAME_FILES_H_
#define KVSERVE_EXPERIMENTS_FRAME_FILES_H_

#include <cstdint>
#include <string>

#include "experiments/lab.h"
#include "kvserve/codec.h"

namespace kvserve::lab {

// One file converted: the uncompressed KV's bytes, the frame's, the seconds
// of the encode (or decode) alone.
struct FrameFileResult {
  uint64_t kv_bytes = 0, frame_bytes = 0;
  uint64_t chunks = 0;       // compress: chunk records written
  uint64_t pruned_rows = 0;  // decompress: token rows the profile pruned (written as 0)
  double seconds = 0;
  // "in -> out: 1.00 MiB -> 256 KiB (CR 4.00x), 16 chunks, encode ..." /
  // "in -> out: 256 KiB -> 1.00 MiB, decode ...".
  std::string CompressText(const std::string& input, const std::string& output) const;
  std::string DecompressText(const std::string& input, const std::string& output) const;
};

// Reads the KV file `input`, encodes it with `profile` (head scores from
// `head_scores_path` when the profile needs them; `threads` encoder
// threads) and writes the frame to `output` whole or not at all.
Result<FrameFileResult> CompressKvFile(const std::string& input, const std::string& output,
                                       const Profile& profile, const std::string& head_scores_path,
                                       int threads, const Progress& progress);

// Reads the frame file `input`, decodes it (every record and checksum
// checked before the output is allocated; ResourceExhausted, with a hint,
// above `max_output_bytes`) and writes the KV file `output` with metadata
// naming the frame, its profile and the pruned rows.
Result<FrameFileResult> DecompressFrameFile(const std::string& input, const std::string& output,
                                            uint64_t max_output_bytes, int threads,
                                            const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_FRAME_FILES_H_
