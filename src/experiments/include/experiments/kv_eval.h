// Copyright kvserve authors. `kvserve eval`'s measurement: a profile's
// compression ratio, speed and reconstruction error on one KV cache, per
// layer and K/V. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_KV_EVAL_H_
#define KVSERVE_EXPERIMENTS_KV_EVAL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"

namespace kvserve::lab {

// Reconstruction error over a set of elements.
struct ErrorStats {
  double max_abs = 0;
  double sum_sq_err = 0;
  double sum_sq_signal = 0;
  uint64_t count = 0;

  void Add(const ErrorStats& o);
  // Root mean square error; 0 for no elements.
  double Rmse() const;
  // Signal-to-noise ratio in dB (10 log10 of signal over error energy);
  // +inf when the reconstruction is exact.
  double SnrDb() const;
  // {"max_abs", "rmse", "elements", "snr_db" (a number, or "inf")}.
  nlohmann::json Json() const;
};
// "12.34", or "inf".
std::string FormatSnr(double snr_db);

// The errors of `got` against `ref` (same shape), one ErrorStats per
// (layer, K/V) at index layer * 2 + kind, skipping the token rows that
// `keep_mask` (one byte per (layer, kind, head, token) row; empty = keep
// all) marks pruned; `*kept_rows` counts the rows compared.
std::vector<ErrorStats> CompareCaches(const KvView& ref, const KvView& got,
                                      const std::vector<uint8_t>& keep_mask, uint64_t* kept_rows);

// One profile measured on one cache.
struct ProfileEvaluation {
  std::string name;     // as given
  std::string profile;  // Profile::ToString()
  uint64_t input_bytes = 0, frame_bytes = 0;
  double compression_ratio = 0;
  double encode_gbps = 0, decode_gbps = 0, round_trip_gbps = 0;  // GB/s of uncompressed KV
  double kept_fraction = 1;  // token rows kept (duo prunes some)
  bool bit_exact = false;
  ErrorStats key, value;           // over all layers
  std::vector<ErrorStats> layers;  // layer * 2 + kind
  // The fields above, per-layer errors included, as `kvserve eval --json`
  // prints one result.
  nlohmann::json Json() const;
  // A title line (name, profile, CR, speeds, kept rows when some were
  // pruned) and max |error|, RMSE and SNR per layer and K/V.
  std::string LayerTable() const;
};

// One row per evaluation: CR, encode / decode / round-trip GB/s, and the
// K and V error totals, the profile column as wide as the longest name.
std::string EvaluationTable(const std::vector<ProfileEvaluation>& rows);

// Encodes and decodes `kv` with `profile` (MeasureProfileCost: `threads`,
// best of `repeat` per direction) and compares the result with the input.
// A lossless profile that does not reproduce the input bit-exactly is
// Internal; errors of the codec are returned with `name` as context.
Result<ProfileEvaluation> EvaluateProfile(const std::string& name, const Profile& profile,
                                          const KvView& kv, const HeadScores* head_scores,
                                          int threads, int repeat, const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_KV_EVAL_H_
