// Copyright kvserve authors. The quality evaluator (include/kvserve/quality.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "kvserve/quality.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Hex64(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t HashIds(std::span<const int32_t> ids, uint64_t seed) {
  return XXH3_64bits_withSeed(ids.data(), ids.size_bytes(), seed);
}

// File-name-safe form of a sample id.
std::string SafeId(const std::string& id) {
  std::string out;
  for (char c : id.substr(0, 64)) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  }
  return out;
}

Result<uint64_t> HashFile(const fs::path& path, XXH3_state_t* state) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path.string() + ": cannot open");
  std::vector<char> buf(1 << 20);
  uint64_t bytes = 0;
  while (in) {
    in.read(buf.data(), buf.size());
    const std::streamsize got = in.gcount();
    if (got > 0) XXH3_64bits_update(state, buf.data(), static_cast<size_t>(got));
    bytes += got;
  }
  if (in.bad()) return Status::IOError(path.string() + ": read failed");
  return bytes;
}

Result<std::string> Fingerprint(const std::string& dir) {
  std::vector<fs::path> files{fs::path(dir) / "config.json"};
  std::error_code ec;
  std::vector<fs::path> shards;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") shards.push_back(e.path());
  }
  if (ec) return Status::IOError(dir + ": " + ec.message());
  std::sort(shards.begin(), shards.end());
  files.insert(files.end(), shards.begin(), shards.end());
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    XXH3_64bits_update(state, name.data(), name.size());
    auto r = HashFile(f, state);
    if (!r.ok()) {
      XXH3_freeState(state);
      return r.status();
    }
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return Hex64(h);
}

std::string JoinIds(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

std::string ToHex(const std::vector<float>& v) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  std::string out(v.size() * 8, '0');
  for (size_t i = 0; i < v.size() * 4; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

bool FromHex(const std::string& s, std::vector<float>* v) {
  if (s.size() % 8 != 0) return false;
  v->assign(s.size() / 8, 0.0f);
  auto* p = reinterpret_cast<uint8_t*>(v->data());
  auto nibble = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size() / 2; ++i) {
    const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

uint64_t CacheChecksum(const PrefilledSample& p) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, p.kv.bytes(), p.kv.size_bytes());
  XXH3_64bits_update(state, p.token_ids.data(), p.token_ids.size() * sizeof(int32_t));
  XXH3_64bits_update(state, p.last_logits.data(), p.last_logits.size() * sizeof(float));
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

// A cached prefill, verified against what it must hold.
Result<PrefilledSample> LoadCached(const std::string& path, const KvShape& shape, DType dtype,
                                   const std::vector<int32_t>& tokens, int vocab) {
  KvFileMetadata meta;
  KVSERVE_ASSIGN_OR_RETURN(KvCache kv, LoadKvFile(path, &meta));
  PrefilledSample out;
  out.kv = std::move(kv);
  out.token_ids = tokens;
  if (out.kv.shape() != shape || out.kv.dtype() != dtype || meta["token_ids"] != JoinIds(tokens) ||
      !FromHex(meta["last_logits"], &out.last_logits) ||
      out.last_logits.size() != static_cast<size_t>(vocab) ||
      meta["checksum"] != Hex64(CacheChecksum(out))) {
    return Status::Corruption(path + ": stale or corrupt prefill cache entry");
  }
  return out;
}

int32_t ArgMax(const float* row, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;  // lowest id on ties
  }
  return best;
}

double NegLogProb(const float* row, int n, int32_t target) {
  float mx = row[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, row[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  return std::log(sum) + mx - row[target];
}

nlohmann::json ScoreToJson(const SampleScore& s) {
  return {{"id", s.id},
          {"exact_match", s.exact_match},
          {"token_accuracy", s.token_accuracy},
          {"nll", s.nll},
          {"predicted", s.predicted},
          {"input_bytes", s.input_bytes},
          {"frame_bytes", s.frame_bytes},
          {"encode_seconds", s.encode_seconds},
          {"decode_seconds", s.decode_seconds}};
}

bool ScoreFromJson(const nlohmann::json& j, SampleScore* s) {
  try {
    s->id = j.at("id").get<std::string>();
    s->exact_match = j.at("exact_match").get<double>();
    s->token_accuracy = j.at("token_accuracy").get<double>();
    s->nll = j.at("nll").get<double>();
    s->predicted = j.at("predicted").get<std::vector<int32_t>>();
    s->input_bytes = j.at("input_bytes").get<uint64_t>();
    s->frame_bytes = j.at("frame_bytes").get<uint64_t>();
    s->encode_seconds = j.at("encode_seconds").get<double>();
    s->decode_seconds = j.at("decode_seconds").get<double>();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

Status WriteTextAtomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return Status::IOError(tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError(path.string() + ": " + ec.message());
  return Status::Ok();
}

double Mean(const std::vector<double>& v, const std::vector<int>& idx) {
  if (idx.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (int i : idx) s += v[i];
  return s / idx.size();
}

double Ratio(double num, double den) {
  if (den == 0) return num == 0 ? std::numeric_limits<double>::quiet_NaN()
                                : std::numeric_limits<double>::infinity();
  return num / den;
}

std::string_view MetricName(QualityMetric m) {
  return m == QualityMetric::kPerplexity ? "perplexity" : "exact_match";
}

}  // namespace

QualityEvaluator::~QualityEvaluator() = default;

Result<std::unique_ptr<QualityEvaluator>> QualityEvaluator::Create(const std::string& model_dir,
                                                                   const RuntimeOptions& options) {
  std::unique_ptr<QualityEvaluator> ev(new QualityEvaluator());
  KVSERVE_ASSIGN_OR_RETURN(ev->model_, Model::Load(model_dir, options));
  KVSERVE_ASSIGN_OR_RETURN(ev->fingerprint_, Fingerprint(model_dir));
  return ev;
}

const Model& QualityEvaluator::model() const { return *model_; }
const std::string& QualityEvaluator::model_fingerprint() const { return fingerprint_; }

Result<PrefilledSample> QualityEvaluator::PrefillSample(const EvalSample& sample,
                                                        const std::string& cache_dir,
                                                        DType wire_dtype) {
  const ModelConfig& c = model_->config();
  std::vector<int32_t> tokens;
  if (c.bos_token_id >= 0) tokens.push_back(c.bos_token_id);
  tokens.insert(tokens.end(), sample.prompt_ids.begin(), sample.prompt_ids.end());
  for (const auto* ids : {&sample.prompt_ids, &sample.answer_ids}) {
    for (int32_t t : *ids) {
      if (t >= c.vocab_size) {
        return Status::InvalidArgument(fmt::format("sample {}: token id {} outside the vocab ({})",
                                                   sample.id, t, c.vocab_size));
      }
    }
  }
  if (c.max_position_embeddings > 0 &&
      tokens.size() + sample.answer_ids.size() > static_cast<size_t>(c.max_position_embeddings)) {
    return Status::InvalidArgument(fmt::format(
        "sample {}: {} prompt + {} answer tokens exceed the model's context ({})", sample.id,
        tokens.size(), sample.answer_ids.size(), c.max_position_embeddings));
  }
  const KvShape shape{c.layers, c.kv_heads, static_cast<int32_t>(tokens.size()), c.head_dim};
  fs::path file;
  if (!cache_dir.empty()) {
    file = fs::path(cache_dir) / fingerprint_ /
           fmt::format("{}-{}.{}.safetensors", SafeId(sample.id), Hex64(HashIds(tokens, 0)),
                       DTypeName(wire_dtype));
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) {
      auto loaded = LoadCached(file.string(), shape, wire_dtype, tokens, c.vocab_size);
      if (loaded.ok()) {
        ++cache_hits_;
        return std::move(loaded).value();
      }
      // Unreadable or stale: recompute and overwrite below.
    }
  }
  KVSERVE_ASSIGN_OR_RETURN(PrefillResult pre, model_->Prefill(tokens));
  ++prefills_;
  PrefilledSample out;
  out.token_ids = tokens;
  out.last_logits = pre.kv.last_logits();
  // The KV as the prefill node would send it: cast to the wire dtype.
  const KvView f32 = pre.kv.view();
  out.kv = KvCache(wire_dtype, f32.shape);
  {
    const MutableKvView dst = out.kv.mutable_view();
    const size_t es = DTypeSize(wire_dtype);
    for (int l = 0; l < shape.layers; ++l)
      for (int k = 0; k < 2; ++k)
        for (int h = 0; h < shape.kv_heads; ++h)
          for (int t = 0; t < shape.tokens; ++t) {
            const float* src = reinterpret_cast<const float*>(f32.At(l, k, h, t, 0));
            std::byte* o = dst.At(l, k, h, t, 0);
            for (int d = 0; d < shape.head_dim; ++d) StoreFromFloat(src[d], o + d * es, wire_dtype);
          }
  }
  if (!file.empty()) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec) return Status::IOError(file.parent_path().string() + ": " + ec.message());
    KvFileMetadata meta = {{"source", "kvserve quality prefill cache"},
                           {"sample", sample.id},
                           {"token_ids", JoinIds(out.token_ids)},
                           {"last_logits", ToHex(out.last_logits)},
                           {"checksum", Hex64(CacheChecksum(out))}};
    const std::string tmp = file.string() + ".tmp";
    KVSERVE_RETURN_IF_ERROR(SaveKvFile(tmp, out.kv.view(), meta));
    fs::rename(tmp, file, ec);
    if (ec) return Status::IOError(file.string() + ": " + ec.message());
  }
  return out;
}

Result<SampleScore> QualityEvaluator::ScoreSample(const EvalSample& sample,
                                                  const PrefilledSample& prefilled,
                                                  const Profile& profile,
                                                  const QualityOptions& options) {
  const ModelConfig& c = model_->config();
  SampleScore score;
  score.id = sample.id;
  const KvView wire = prefilled.kv.view();
  const DType dtype = wire.dtype;
  score.input_bytes = static_cast<uint64_t>(wire.LogicalBytes());

  EncodeOptions eo;
  eo.threads = options.codec_threads;
  eo.head_scores = options.head_scores;
  KVSERVE_ASSIGN_OR_RETURN(auto encoder, EncoderContext::Create(profile, eo));
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  double t0 = Now();
  KVSERVE_RETURN_IF_ERROR(encoder->Encode(wire, sink));
  score.encode_seconds = Now() - t0;
  score.frame_bytes = frame.size();

  KVSERVE_ASSIGN_OR_RETURN(auto decoder, DecoderContext::Create(DecodeOptions{options.codec_threads}));
  KvCache decoded(dtype, wire.shape);
  std::vector<uint8_t> mask;
  t0 = Now();
  KVSERVE_RETURN_IF_ERROR(decoder->Decode(frame, decoded.mutable_view(), &mask));
  score.decode_seconds = Now() - t0;

  // Import into the runtime; pruned tokens are hidden by the keep-mask.
  KVSERVE_ASSIGN_OR_RETURN(KvState kv, KvState::FromView(decoded.view(), prefilled.token_ids));
  kv.set_last_logits(prefilled.last_logits);
  const KvShape& s = wire.shape;
  if (std::find(mask.begin(), mask.end(), uint8_t{0}) != mask.end()) {
    std::vector<uint8_t> keep(s.tokens);
    for (int l = 0; l < s.layers; ++l)
      for (int h = 0; h < s.kv_heads; ++h) {
        const size_t kb = ((static_cast<size_t>(l) * 2 + 0) * s.kv_heads + h) * s.tokens;
        const size_t vb = ((static_cast<size_t>(l) * 2 + 1) * s.kv_heads + h) * s.tokens;
        for (int t = 0; t < s.tokens; ++t) keep[t] = (mask[kb + t] && mask[vb + t]) ? 1 : 0;
        KVSERVE_RETURN_IF_ERROR(kv.SetKeepMask(l, h, keep));
      }
  }

  // Teacher-forced scoring of the answer.
  const std::vector<int32_t>& ans = sample.answer_ids;
  const int n = static_cast<int>(ans.size());
  const int vocab = c.vocab_size;
  std::vector<float> logits;
  if (n > 1) {
    KVSERVE_ASSIGN_OR_RETURN(logits, model_->Decode(&kv, std::span(ans).first(n - 1), true));
  }
  int correct = 0;
  double nll = 0;
  score.predicted.resize(n);
  for (int i = 0; i < n; ++i) {
    const float* row = i == 0 ? prefilled.last_logits.data()
                              : logits.data() + static_cast<size_t>(i - 1) * vocab;
    score.predicted[i] = ArgMax(row, vocab);
    correct += score.predicted[i] == ans[i];
    nll += NegLogProb(row, vocab, ans[i]);
  }
  score.token_accuracy = static_cast<double>(correct) / n;
  score.exact_match = correct == n ? 1.0 : 0.0;
  score.nll = nll / n;
  return score;
}

Result<QualityReport> QualityEvaluator::Evaluate(const std::vector<EvalSample>& samples,
                                                 const Profile& profile,
                                                 const QualityOptions& options) {
  KVSERVE_RETURN_IF_ERROR(profile.Validate());
  if (samples.empty()) return Status::InvalidArgument("no samples to evaluate");
  const double start = Now();
  const int prefills0 = prefills_, hits0 = cache_hits_;
  QualityReport r;
  r.workload = samples.front().workload;
  r.profile = profile.ToString();
  r.metric = samples.front().metric;
  for (const EvalSample& s : samples) {
    if (s.metric != r.metric) {
      return Status::InvalidArgument("samples mix metrics (" + std::string(MetricName(r.metric)) +
                                     ", " + std::string(MetricName(s.metric)) + ")");
    }
  }
  r.samples_total = static_cast<int>(samples.size());
  const std::vector<int> chosen = ChooseSubset(r.samples_total, options.samples, options.seed);
  r.samples_scored = static_cast<int>(chosen.size());
  r.subset = r.samples_scored < r.samples_total;
  const Profile none;
  const std::string wire(DTypeName(options.wire_dtype));
  for (size_t k = 0; k < chosen.size(); ++k) {
    const EvalSample& sample = samples[chosen[k]];
    KVSERVE_ASSIGN_OR_RETURN(PrefilledSample kv,
                             PrefillSample(sample, options.cache_dir, options.wire_dtype));
    // Baseline: the "none" profile through the same path, cached with the KV.
    SampleScore base;
    bool have_base = false;
    fs::path base_file;
    if (!options.cache_dir.empty()) {
      base_file = fs::path(options.cache_dir) / fingerprint_ /
                  fmt::format("{}-{}-{}.{}.none.json", SafeId(sample.id),
                              Hex64(HashIds(kv.token_ids, 0)), Hex64(HashIds(sample.answer_ids, 1)),
                              wire);
      std::ifstream in(base_file);
      if (in) {
        std::stringstream ss;
        ss << in.rdbuf();
        auto j = nlohmann::json::parse(ss.str(), nullptr, false);
        have_base = !j.is_discarded() && ScoreFromJson(j, &base) && base.id == sample.id &&
                    base.predicted.size() == sample.answer_ids.size();
      }
    }
    if (!have_base) {
      KVSERVE_ASSIGN_OR_RETURN(base, ScoreSample(sample, kv, none, options));
      if (!base_file.empty()) KVSERVE_RETURN_IF_ERROR(WriteTextAtomically(base_file, ScoreToJson(base).dump()));
    }
    KVSERVE_ASSIGN_OR_RETURN(SampleScore got, ScoreSample(sample, kv, profile, options));
    r.baseline.push_back(std::move(base));
    r.samples.push_back(std::move(got));
    if (options.progress) {
      options.progress(fmt::format("{}/{} {}: em {} tok-acc {:.3f} (none {:.3f}) cr {:.2f}", k + 1,
                                   chosen.size(), sample.id, r.samples.back().exact_match,
                                   r.samples.back().token_accuracy, r.baseline.back().token_accuracy,
                                   static_cast<double>(r.samples.back().input_bytes) /
                                       r.samples.back().frame_bytes));
    }
  }

  const int n = r.samples_scored;
  std::vector<double> em(n), bem(n), tok(n), btok(n), nll(n), bnll(n), rppl(n);
  double cr_sum = 0, in_sum = 0, frame_sum = 0, enc = 0, dec = 0, same = 0;
  for (int i = 0; i < n; ++i) {
    const SampleScore& p = r.samples[i];
    const SampleScore& b = r.baseline[i];
    em[i] = p.exact_match, bem[i] = b.exact_match;
    tok[i] = p.token_accuracy, btok[i] = b.token_accuracy;
    nll[i] = p.nll, bnll[i] = b.nll;
    rppl[i] = std::exp(b.nll - p.nll);  // ppl_none / ppl_profile
    cr_sum += static_cast<double>(p.input_bytes) / p.frame_bytes;
    in_sum += p.input_bytes, frame_sum += p.frame_bytes;
    enc += p.encode_seconds, dec += p.decode_seconds;
    same += p.predicted == b.predicted;
  }
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  r.token_accuracy = Mean(tok, all);
  r.baseline_token_accuracy = Mean(btok, all);
  auto rel_tok = [&](const std::vector<int>& idx) { return Ratio(Mean(tok, idx), Mean(btok, idx)); };
  std::function<double(const std::vector<int>&)> rel;
  if (r.metric == QualityMetric::kPerplexity) {
    r.metric_value = std::exp(Mean(nll, all));
    r.baseline_metric_value = std::exp(Mean(bnll, all));
    rel = [&](const std::vector<int>& idx) { return Mean(rppl, idx); };
  } else {
    r.metric_value = Mean(em, all);
    r.baseline_metric_value = Mean(bem, all);
    rel = [&](const std::vector<int>& idx) { return Ratio(Mean(em, idx), Mean(bem, idx)); };
  }
  r.relative = rel(all);
  r.relative_ci = BootstrapInterval(n, rel, options.bootstrap_resamples, options.seed);
  r.relative_token_accuracy = rel_tok(all);
  r.relative_token_accuracy_ci =
      BootstrapInterval(n, rel_tok, options.bootstrap_resamples, options.seed + 1);
  r.identical_predictions = same / n;
  r.cr_mean = cr_sum / n;
  r.cr_aggregate = in_sum / frame_sum;
  r.encode_ms_mean = enc / n * 1e3;
  r.decode_ms_mean = dec / n * 1e3;
  r.prefills = prefills_ - prefills0;
  r.prefill_cache_hits = cache_hits_ - hits0;
  r.seconds = Now() - start;
  return r;
}

std::string QualityReport::ToJson(bool per_sample) const {
  auto num = [](double v) -> nlohmann::json {
    if (std::isfinite(v)) return v;
    return nullptr;
  };
  nlohmann::json j = {
      {"workload", workload},
      {"profile", profile},
      {"metric", MetricName(metric)},
      {"samples_total", samples_total},
      {"samples_scored", samples_scored},
      {"subset", subset},
      {"metric_value", num(metric_value)},
      {"baseline_metric_value", num(baseline_metric_value)},
      {"token_accuracy", num(token_accuracy)},
      {"baseline_token_accuracy", num(baseline_token_accuracy)},
      {"relative", num(relative)},
      {"relative_ci95", {num(relative_ci.low), num(relative_ci.high)}},
      {"relative_token_accuracy", num(relative_token_accuracy)},
      {"relative_token_accuracy_ci95",
       {num(relative_token_accuracy_ci.low), num(relative_token_accuracy_ci.high)}},
      {"identical_predictions", identical_predictions},
      {"cr_mean", num(cr_mean)},
      {"cr_aggregate", num(cr_aggregate)},
      {"encode_ms_mean", encode_ms_mean},
      {"decode_ms_mean", decode_ms_mean},
      {"prefills", prefills},
      {"prefill_cache_hits", prefill_cache_hits},
      {"seconds", seconds},
  };
  if (per_sample) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < samples.size(); ++i) {
      nlohmann::json row = ScoreToJson(samples[i]);
      row["baseline"] = ScoreToJson(baseline[i]);
      rows.push_back(std::move(row));
    }
    j["samples"] = std::move(rows);
  }
  return j.dump(2);
}

}  // namespace kvserve
