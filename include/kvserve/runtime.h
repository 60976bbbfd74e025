// Copyright kvserve authors. A small CPU transformer runtime for decoder-only
// models in Hugging Face layout (Llama and Qwen2 families), with the
// prefill/decode split of disaggregated serving as its API.
//
//   Model::Load(dir)          config.json + *.safetensors (fp32/fp16/bf16)
//   Model::Prefill(tokens)    -> KvState (the KV cache) + last logits; a
//                                callback fires as soon as layer l's K/V are
//                                final, so compression/sending can overlap
//   KvStateSize/Get/Set       llama.cpp-shaped export/import of a KvState
//   Model::Decode(&kv, toks)  -> logits, appending to the KV cache
//   Sampler                   greedy or temperature/top-p with a seed
//
// Compute is fp32 on the CPU: matrix products through BLAS (big GEMMs over
// all prompt tokens at once for prefill), attention spread over threads.
//
// Thread safety: a loaded Model is immutable; Prefill/Decode may run
// concurrently from several threads on distinct KvStates. A KvState is a
// plain value (not synchronised).
#ifndef KVSERVE_RUNTIME_H_
#define KVSERVE_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/status.h"

namespace kvserve {

enum class ModelFamily : uint8_t { kLlama = 0, kQwen2 = 1 };

// The architecture hyper-parameters read from config.json.
struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int layers = 0;
  int heads = 0;      // query heads
  int kv_heads = 0;   // key/value heads (GQA when < heads)
  int head_dim = 0;
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2: q/k/v projections carry a bias
  int max_position_embeddings = 0;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  // Weights excluding the (input) embedding table; includes the LM head.
  int64_t NonEmbeddingParameters() const;
  // Matmul + attention FLOPs of a forward over `tokens` new tokens that
  // follow `past` cached ones, with logits for `logit_rows` of them.
  double ForwardFlops(int64_t past, int64_t tokens, int64_t logit_rows) const;
};

// Parses the text of a config.json. NotSupported (naming the key) for an
// architecture or option the runtime does not implement (rope_scaling,
// sliding-window attention, a non-SiLU activation, unknown keys, ...);
// InvalidArgument for inconsistent sizes.
Result<ModelConfig> ParseModelConfig(const std::string& json_text);

// Applies the text of a generation_config.json to `config`, as HF generate()
// reads it: its eos_token_id (an id or a list, e.g. Llama-3-Instruct's
// [128001, 128009]) replaces config.json's, its bos_token_id likewise.
// Model::Load applies the directory's file when there is one. Corruption if
// it is not a JSON object or an id is not in [0, vocab_size).
Status ApplyGenerationConfig(const std::string& json_text, ModelConfig* config);

// The runtime's KV cache for one sequence: f32, [layer][K/V][kv_head][token]
// [dim] with room to grow (views are strided over the capacity). Also holds
// the token ids it was computed from and an optional per-(layer, kv_head)
// keep-mask over tokens (for pruned KV: masked tokens take no attention).
class KvState {
 public:
  KvState() = default;
  KvState(int layers, int kv_heads, int head_dim);
  KvState(KvState&&) = default;
  KvState& operator=(KvState&&) = default;
  KvState(const KvState&) = delete;
  KvState& operator=(const KvState&) = delete;

  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int tokens() const { return static_cast<int>(token_ids_.size()); }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }

  // View of all cached tokens (shape.tokens == tokens()), f32, strided.
  KvView view() const;
  MutableKvView mutable_view();
  // View of one layer (shape.layers == 1).
  KvView layer_view(int layer) const;
  // Pointer to K (kind 0) or V (kind 1) of (layer, head): `capacity` rows of
  // head_dim floats, row t = token t.
  const float* head_data(int layer, int kind, int head) const;
  float* head_data(int layer, int kind, int head);

  // Grows the capacity to at least `tokens` (contents preserved).
  void Reserve(int tokens);
  // Appends token ids with zeroed K/V (the runtime fills them); extends the
  // keep-mask (if any) with "keep".
  void AppendTokens(std::span<const int32_t> ids);
  // Drops tokens after the first `tokens`. InvalidArgument if > tokens().
  Status Truncate(int tokens);

  // Keep-mask: 1 keeps a token for (layer, head), 0 hides it from attention.
  bool has_keep_mask() const { return !keep_.empty(); }
  // Sets the mask of (layer, head); `keep` has tokens() entries.
  // InvalidArgument on a size or index mismatch.
  Status SetKeepMask(int layer, int head, std::span<const uint8_t> keep);
  // Mask row of (layer, head), capacity entries (valid for [0, tokens())), or
  // nullptr when no mask is set.
  const uint8_t* keep_mask(int layer, int head) const;
  void ClearKeepMask() { keep_.clear(); }

  // Logits of the last token run into this state (what to sample next),
  // as llama.cpp keeps them in its state. Set by Prefill and Decode; carried
  // by the state API. Empty for a state built from a bare KV view.
  const std::vector<float>& last_logits() const { return last_logits_; }
  void set_last_logits(std::vector<float> logits) { last_logits_ = std::move(logits); }

  // Contiguous deep copy of view().
  KvCache ToCache() const;
  // A state holding `kv` (any dtype and strides; converted to f32) and the
  // `token_ids` it was computed from (one per kv token).
  static Result<KvState> FromView(const KvView& kv, std::span<const int32_t> token_ids);

 private:
  size_t HeadOffset(int layer, int kind, int head) const {
    return ((static_cast<size_t>(layer) * 2 + kind) * kv_heads_ + head) * capacity_ * head_dim_;
  }
  int layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  std::vector<float> data_;
  std::vector<int32_t> token_ids_;
  std::vector<uint8_t> keep_;  // [layer][head][capacity] when set
  std::vector<float> last_logits_;
};

// --- llama.cpp-style state API (llama_state_seq_get_size/get_data/set_data).
// One serializer writes through a ByteSink, so size and data cannot drift.
// Format: "KVST" magic, version, shape, token ids, last logits, optional
// keep-mask, f32 K/V, XXH3 checksum of everything before it (little-endian).

// Exact number of bytes KvStateGet writes.
size_t KvStateSize(const KvState& kv);
// Serialises `kv` into `dst`; returns bytes written. ResourceExhausted if
// dst is smaller than KvStateSize(kv).
Result<size_t> KvStateGet(const KvState& kv, std::span<std::byte> dst);
// Serialises `kv` through `sink`.
Status KvStateWrite(const KvState& kv, ByteSink* sink);
// Parses bytes written by KvStateGet. Corruption on any malformed input
// (bad magic/version, sizes that do not add up, checksum mismatch).
Result<KvState> KvStateSet(std::span<const std::byte> src);
// KvStateGet into the file at `path` / KvStateSet from it. IOError, NotFound,
// Corruption.
Status ExportKV(const KvState& kv, const std::string& path);
Result<KvState> ImportKV(const std::string& path);

struct RuntimeOptions {
  // Threads for attention and elementwise work; 0 = hardware concurrency.
  int threads = 0;
};

struct PrefillOptions {
  // Called once per layer, in layer order, as soon as that layer's K/V for
  // the prefilled tokens are final (kvserve/kv.h; the connector's
  // StreamKvWhileProducing feeds on it).
  LayerReadyCallback on_layer_ready;
  // Logits for every prompt token ([tokens][vocab]) instead of the last only.
  bool all_logits = false;
};

struct PrefillResult {
  KvState kv;
  std::vector<float> logits;  // [vocab], or [tokens][vocab] with all_logits
};

// Per-(layer, kv_head) sink + recent-window probe, for head calibration.
struct StreamingProbe {
  int sink_tokens = 4;
  int recent_tokens = 64;
  // Filled by Prefill: [layer][kv_head] sums of the relative squared change
  // ||o_full - o_stream||^2 / ||o_full||^2 over query rows and the query
  // heads of the group, and the number of rows summed.
  std::vector<double> change_sum;
  std::vector<double> rows;
};

class Model {
 public:
  // Loads the HF model directory `dir`: config.json and model.safetensors,
  // or the shards named by model.safetensors.index.json. NotFound (naming
  // the file or tensor), Corruption (malformed file, shape mismatch),
  // NotSupported (config option or dtype not implemented).
  static Result<std::unique_ptr<Model>> Load(const std::string& dir,
                                             const RuntimeOptions& options = {});
  ~Model();

  const ModelConfig& config() const;

  // Runs the prompt `tokens` (non-empty, each in [0, vocab)) from an empty
  // cache. InvalidArgument on a bad token.
  Result<PrefillResult> Prefill(std::span<const int32_t> tokens,
                                const PrefillOptions& options = {}) const;
  // As Prefill, additionally measuring how attention output of each head
  // changes under a sink + recent restriction (the restriction is only
  // measured, never applied).
  Result<PrefillResult> PrefillWithProbe(std::span<const int32_t> tokens,
                                         StreamingProbe* probe) const;

  // Appends `tokens` to `kv` (which must come from this model's shape) and
  // returns the logits of the last one ([vocab]), or of every one with
  // `all_logits`. Attention honours kv's keep-mask. InvalidArgument on a
  // shape mismatch or bad token.
  Result<std::vector<float>> Decode(KvState* kv, std::span<const int32_t> tokens,
                                    bool all_logits = false) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct SamplingOptions {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;
};

// Deterministic for a given seed and logits sequence. Not thread-safe.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // Returns a token id in [0, logits.size()). logits must be non-empty.
  int32_t Sample(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

// Greedy/sampled generation: samples from `first_logits` (typically
// kv->last_logits()), then decodes up to `max_new_tokens` tokens in all,
// stopping after an eos id when `stop_at_eos`. Returns the new tokens.
Result<std::vector<int32_t>> Generate(const Model& model, KvState* kv,
                                      std::span<const float> first_logits,
                                      int max_new_tokens, Sampler* sampler,
                                      bool stop_at_eos = true);

// Text <-> token ids. Two formats: a Hugging Face tokenizer.json with
// byte-level BPE (GPT-2 style, as Llama-3, Qwen2 and Qwen3 ship it), run as
// the Rust `tokenizers` crate runs it (Oniguruma split regex, NFC/NFKC
// normalizers, added and special tokens, TemplateProcessing); and a
// SentencePiece tokenizer.model (libsentencepiece). docs/runtime.md,
// section Tokenizers. Thread safety: const methods are thread-safe.
class Tokenizer {
 public:
  // Loads the tokenizer of the model directory `dir`: its tokenizer.json,
  // else its tokenizer.model (also when the tokenizer.json is a kind this
  // runtime does not implement and a tokenizer.model is there); or the file
  // `dir` itself (*.json: tokenizer.json, else SentencePiece). NotFound if
  // none, Corruption if it does not parse, NotSupported (naming the
  // component) for a tokenizer.json pipeline that is not implemented.
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& dir);
  // A tokenizer.json given as text; `name` prefixes error messages.
  static Result<std::unique_ptr<Tokenizer>> FromHfJson(const std::string& json_text,
                                                       const std::string& name = "tokenizer.json");
  virtual ~Tokenizer() = default;
  // The ids of `text` alone: HF encode(text, add_special_tokens=False).
  // Added and special tokens written in the text (e.g. "<|eot_id|>") become
  // their ids. InvalidArgument if `text` is not valid UTF-8.
  virtual Result<std::vector<int32_t>> Encode(const std::string& text) const = 0;
  // The ids to run a model on for the prompt `text`: Encode(text) inside
  // what the tokenizer adds around a sequence (tokenizer.json: its
  // TemplateProcessing post-processor, e.g. a Llama-3 <|begin_of_text|>;
  // SentencePiece: `bos_token_id`, the model config's, first when >= 0).
  virtual Result<std::vector<int32_t>> EncodePrompt(const std::string& text,
                                                    int bos_token_id) const = 0;
  // The text of `ids`, special tokens included (HF decode with
  // skip_special_tokens=False and no clean-up); byte sequences that are not
  // valid UTF-8 become U+FFFD. InvalidArgument for an id without a token.
  virtual Result<std::string> Decode(std::span<const int32_t> ids) const = 0;
  // One more than the largest token id.
  virtual int vocab_size() const = 0;
};

// A random-weight model directory (config.json + model.safetensors) for
// tests and benchmarks; weights are N(0, 1/fan_in) with unit-ish norms.
struct RandomModelSpec {
  std::string family = "llama";  // or "qwen2"
  int vocab = 97, hidden = 48, intermediate = 80, layers = 2, heads = 6, kv_heads = 2;
  double rope_theta = 10000.0;
  bool tie = false;
  DType dtype = DType::kF32;
  uint64_t seed = 1;
};
// The config.json text of `spec`.
std::string RandomModelConfigJson(const RandomModelSpec& spec);
// Writes `dir`/config.json and `dir`/model.safetensors (creating `dir`).
// IOError on failure.
Status WriteRandomModel(const std::string& dir, const RandomModelSpec& spec);

// Benchmark helpers: the fp32 GEMM rate (GFLOP/s, best of `repeats`, at
// least one, after an untimed warm-up) of the BLAS the runtime uses, on
// n x n x n products; and that BLAS's description.
double MeasureSgemmGflops(int n, int repeats);
std::string BlasDescription();
// Caps the BLAS library's threads for the whole process (n >= 1; it is
// process-wide state, unlike RuntimeOptions::threads). Serving processes
// that share cores with a codec thread or another process set it so idle
// BLAS threads do not spin on the cores the others need.
void SetBlasThreads(int n);

struct HeadCalibrationOptions {
  int sink_tokens = 4;
  int recent_tokens = 64;
};

// DuoAttention-style retrieval scores: for each (layer, kv_head), the mean
// relative change of the head's attention output when its attention is
// restricted to sink + recent tokens, over all `prompts` (query rows beyond
// the window). Higher = more retrieval-like. InvalidArgument if no prompt is
// longer than sink + recent.
Result<HeadScores> CalibrateHeadScores(const Model& model,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const HeadCalibrationOptions& options = {});

}  // namespace kvserve

#endif  // KVSERVE_RUNTIME_H_
