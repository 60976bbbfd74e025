// Copyright kvserve authors. KV cache files and synthetic KV caches.
//
// A KV file is a safetensors file (docs/kv-files.md) holding one tensor per
// (layer, K/V) named "layers.{l}.key" / "layers.{l}.value", each of shape
// [kv_heads, tokens, head_dim] and dtype F32, F16 or BF16 (the same for all
// tensors), plus string metadata with "format": "kvserve-kv" and
// "version": "1". Files written from a real model say "synthetic": "false";
// files from SynthesizeKv say "synthetic": "true".
//
// The synthetic generator produces caches with the structure real ones have
// (so codecs can be tested and benchmarked without model weights), and
// labels them as synthetic. It is deterministic: the same options give the
// same bytes on every run and any thread count.
//
// Thread safety: free functions; no shared state.
#ifndef KVSERVE_KV_FILE_H_
#define KVSERVE_KV_FILE_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/status.h"

namespace kvserve {

// String metadata of a KV file (safetensors "__metadata__").
using KvFileMetadata = std::map<std::string, std::string>;

// Writes `kv` (any strides) to `path` as a KV file in the view's dtype.
// `metadata` is merged with the mandatory "format"/"version" keys (which it
// must not override; InvalidArgument if it tries) and "synthetic" defaults to
// "false" when absent. IOError when the file cannot be written.
Status SaveKvFile(const std::string& path, const KvView& kv,
                  const KvFileMetadata& metadata = {});

// Reads the KV file at `path` into a contiguous cache in the file's dtype.
// If `metadata` is non-null it receives the file's metadata. NotFound if the
// file does not exist; Corruption if it is not a well-formed KV file
// (missing or extra tensors, inconsistent shapes or dtypes, wrong format tag).
Result<KvCache> LoadKvFile(const std::string& path, KvFileMetadata* metadata = nullptr);
// LoadKvFile of a file image held in memory; `source` names it in errors.
// The cache it allocates is at most the tensors' bytes, which the format
// makes tile the image: memory is bounded by the bytes given.
Result<KvCache> ParseKvFile(std::span<const std::byte> bytes, const std::string& source,
                            KvFileMetadata* metadata = nullptr);

// Options of the synthetic generator. Magnitudes are those of a typical
// Llama-family model's post-RoPE keys and values.
struct SynthOptions {
  KvShape shape{4, 4, 512, 64};  // the "small" preset
  DType dtype = DType::kBF16;
  uint64_t seed = 1;
  // Lag-1 correlation of neighbouring tokens (AR(1) along tokens), K and V.
  float token_correlation_key = 0.9f;
  float token_correlation_value = 0.6f;
  // Fraction of key channels that are outliers (per layer and head), and
  // their magnitude relative to an ordinary channel.
  float key_outlier_fraction = 0.04f;
  float key_outlier_scale = 12.0f;
  float value_outlier_fraction = 0.02f;
  float value_outlier_scale = 3.0f;
  // RoPE base: channel pair (i, i + head_dim/2) rotates by
  // token * rope_base^(-2i/head_dim) radians.
  float rope_base = 500000.0f;
};

// A named shape preset for the generator.
struct SynthShapePreset {
  std::string_view name;         // "small", "llama3-8b", ...
  KvShape shape;                 // tokens is a default; callers may override
  std::string_view description;  // one line
};
// Built-in shape presets, in a stable order ("small" first).
std::span<const SynthShapePreset> SynthShapePresets();
// Looks up a preset by name; NotFound lists the valid names.
Result<SynthShapePreset> FindSynthShapePreset(std::string_view name);

// Generates a synthetic KV cache (see the header comment and
// docs/kv-files.md for the model). InvalidArgument for a non-positive shape
// or an odd head_dim; ResourceExhausted beyond 2^34 elements.
Result<KvCache> SynthesizeKv(const SynthOptions& options);

// Synthetic per-(layer, head) retrieval scores in [0, 1] for caches from
// SynthesizeKv (for mixhq and duo): most heads score low, a skewed minority
// high, as DuoAttention reports for trained models. Deterministic in `seed`.
HeadScores SynthesizeHeadScores(int layers, int kv_heads, uint64_t seed);

// Metadata describing `options`, with "synthetic": "true"; pass it to
// SaveKvFile for a generated cache.
KvFileMetadata SynthMetadata(const SynthOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_KV_FILE_H_
