// Copyright kvserve authors. RunE2e (experiments/e2e.h): the end-to-end
// benchmark of disaggregated serving (paper §7.2).
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "experiments/e2e.h"
#include "experiments/model_directory.h"
#include "kvserve/codec.h"
#include "kvserve/controller.h"
#include "kvserve/pool.h"
#include "kvserve/process.h"
#include "kvserve/profile.h"
#include "kvserve/runtime.h"
#include "kvserve/serve.h"
#include "kvserve/profiler.h"
#include "kvserve/transport.h"

namespace kvserve::lab {
namespace {

// Pins process `pid` (0: this process, every thread it starts later) to
// `cpu`; best effort (a failure leaves the scheduler free).
void PinToCpu(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)::sched_setaffinity(pid, sizeof(set), &set);
}

// A decode worker in a child process (`kvserve serve --role decode`).
class DecodeProcess {
 public:
  ~DecodeProcess() { Stop(); }
  // `cpu` >= 0 pins the process to that CPU.
  Status Start(const std::string& executable, const std::string& model_dir,
               const std::string& secret, int cpu) {
    std::string exe = executable;
    if (exe.empty()) {
      KVSERVE_ASSIGN_OR_RETURN(exe, SelfExecutable());
    }
    dir_ = (std::filesystem::temp_directory_path() / ("kvserve-e2e-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir_);
    const std::string address_file = dir_ + "/decode.addr";
    std::vector<std::string> args = {exe, "serve", "--role", "decode", "--model", model_dir,
                                     "--listen", "127.0.0.1:0", "--address-file", address_file,
                                     "--threads", "1", "--codec-threads", "1"};
    auto pid = SpawnProcess(args, {"KVSERVE_SECRET=" + secret}, /*stdout_to_null=*/true);
    if (!pid.ok()) return pid.status().WithContext("starting the decode worker process");
    pid_ = *pid;
    if (cpu >= 0) PinToCpu(pid_, cpu);
    for (int i = 0; i < 1200; ++i) {  // up to 60 s (model loading)
      std::ifstream in(address_file);
      if (in >> address_) return Status::Ok();
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::Unavailable("the decode worker process exited during start-up");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Status::Timeout("the decode worker process did not start within 60 s");
  }
  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      for (int i = 0; i < 100 && ::waitpid(pid_, nullptr, WNOHANG) != pid_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  std::string dir_, address_;
};

std::string RandomSecret() {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 32; ++i) s += fmt::format("{:02x}", rd() & 0xff);
  return s;
}

// Encode/decode throughput, CR and fixed overhead of `spec` on `kv`,
// measured on one thread (best of `repeats`).
Result<ProfileCost> Calibrate(const std::string& spec, const KvView& kv, int repeats,
                              const HeadScores* head_scores) {
  KVSERVE_ASSIGN_OR_RETURN(Profile profile, Profile::Parse(spec));
  KVSERVE_ASSIGN_OR_RETURN(ProfileCostMeasurement m,
                           MeasureProfileCost(profile, kv,
                                              {.threads = 1,
                                               .repeats = repeats,
                                               .head_scores = head_scores,
                                               .measure_overhead = true}));
  ProfileCost p;
  p.spec = spec;
  p.compression_ratio = m.codec.compression_ratio;
  p.encode_bytes_per_second = m.codec.encode_bytes_per_second;
  p.decode_bytes_per_second = m.codec.decode_bytes_per_second;
  p.overhead_seconds = m.codec.overhead_seconds;
  return p;
}

}  // namespace

Result<std::vector<std::pair<std::string, double>>> ReportedQualities(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (!j.is_array()) return Status::Corruption("not a JSON array of kvserve quality reports");
  std::vector<std::pair<std::string, double>> out;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("profile") || !e["profile"].is_string()) continue;
    const auto ci = e.find("relative_ci95");
    if (ci != e.end() && ci->is_array() && !ci->empty() && (*ci)[0].is_number())
      out.emplace_back(e["profile"].get<std::string>(), (*ci)[0].get<double>());
    else if (e.contains("relative") && e["relative"].is_number())
      out.emplace_back(e["profile"].get<std::string>(), e["relative"].get<double>());
  }
  return out;
}

Result<E2eReport> RunE2e(const E2eOptions& a, const Progress& progress) {
  const double run_start = NowSeconds();
  E2eReport rep;
  rep.command = a.command_line;
  rep.machine = MachineDescription();
  rep.quality_min = a.quality_min;
  rep.prompt_tokens = a.prompt_tokens;
  rep.new_tokens = a.new_tokens;
  rep.requests = a.requests;

  // --- Model, profile table and the decode worker process.
  std::string model_note;
  auto dir = ResolveModelDirectory(
      a.model, DataPath(a.data_dir, "models"),
      (std::filesystem::temp_directory_path() / "kvserve-fallback-model-v1").string(), &model_note);
  if (!dir.ok()) return dir.status();
  Note(progress, "{}", model_note);
  rep.model_note = *dir;

  // --- The profile table: the model's measured task table; without one,
  // --table must name a table (checked before any process starts).
  const std::string model_name = std::filesystem::path(*dir).filename().string();
  std::string table_path = a.table, workload_name = a.workload, report_path = a.quality_report;
  if (table_path.empty()) {
    table_path = DataPath(a.data_dir, fmt::format("configs/profiles/{}-{}.json", model_name, a.workload));
    if (report_path.empty() && std::filesystem::exists(table_path)) {
      // Held-out scores first (scripts/profiling_task_report.sh: samples no
      // search saw, as the table's own qualities), else the quality report.
      report_path = DataPath(a.data_dir, fmt::format("docs/results/profiling/{}.baselines.json", a.workload));
      if (!std::filesystem::exists(report_path))
        report_path = DataPath(a.data_dir, fmt::format("docs/results/quality/{}.json", a.workload));
    }
    if (!std::filesystem::exists(table_path))
      return Status::NotFound(fmt::format(
          "no measured task table {} for this model: pass --table FILE "
          "(configs/profile_table.example.json holds hand-written qualities, with --workload chat)",
          table_path));
  }
  rep.workload = workload_name;
  auto source_table = ProfileTable::Load(table_path);
  if (!source_table.ok()) return source_table.status().WithContext(table_path);
  auto workload_index = source_table->WorkloadIndex(workload_name);
  if (!workload_index.ok())
    return workload_index.status().WithContext("--workload");
  rep.table_source = table_path;

  SetBlasThreads(a.threads);  // the decode process and the codec threads share the cores
  auto model = Model::Load(*dir, {.threads = a.threads});
  if (!model.ok()) return model.status().WithContext("loading " + *dir);
  const ModelConfig& mc = (*model)->config();
  rep.layers = mc.layers;
  rep.model_shape = fmt::format("{} layers, {} KV heads x {} dims, hidden {}, vocabulary {}",
                                mc.layers, mc.kv_heads, mc.head_dim, mc.hidden_size, mc.vocab_size);
  // Head scores for mixhq / duo profiles, when the model ships them.
  std::unique_ptr<HeadScores> head_scores;
  if (std::filesystem::exists(*dir + "/head_scores.json")) {
    auto scores = HeadScores::Load(*dir + "/head_scores.json");
    if (scores.ok() && scores->layers == mc.layers && scores->kv_heads == mc.kv_heads)
      head_scores = std::make_unique<HeadScores>(std::move(*scores));
  }
  const std::string secret = RandomSecret();
  DecodeProcess decode;
  Note(progress, "starting the decode worker process");
  // With two or more cores the prefill worker (this process) and the decode
  // worker run on different cores, as they would on different machines.
  const bool pin = a.pin && std::thread::hardware_concurrency() >= 2;
  KVSERVE_RETURN_IF_ERROR(decode.Start(a.worker_executable, *dir, secret, pin ? 1 : -1));
  if (pin) PinToCpu(0, 0);
  rep.pinned = pin;
  Note(progress, "decode worker at {}", decode.address());

  // Measured qualities of more pipelines (e.g. the presets) for the same
  // workload: `kvserve quality` results, a JSON array of {profile, relative}.
  std::vector<std::pair<std::string, double>> reported;
  if (!report_path.empty() && std::filesystem::exists(report_path)) {
    auto text = ReadTextFile(report_path);
    if (!text.ok()) return text.status();
    auto got = ReportedQualities(*text);
    if (!got.ok()) return got.status().WithContext(report_path);
    reported = std::move(*got);
    rep.report_source = report_path;
  }
  std::mt19937_64 rng(a.seed);
  std::vector<std::vector<int32_t>> file_prompts;
  std::string prompts_path = a.prompts;
  if (prompts_path.empty())
    prompts_path = DataPath(a.data_dir, fmt::format("configs/e2e/{}-{}.jsonl", model_name, workload_name));
  if (std::filesystem::exists(prompts_path)) {
    std::ifstream in(prompts_path);
    if (!in) return Status::IOError("cannot read " + prompts_path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("prompt_ids") || !j["prompt_ids"].is_array())
        continue;
      std::vector<int32_t> ids;
      for (const auto& v : j["prompt_ids"])
        if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
      if (ids.size() > static_cast<size_t>(a.prompt_tokens))
        ids.erase(ids.begin(), ids.end() - a.prompt_tokens);  // keep the end (the question)
      bool valid = ids.size() >= 2;
      for (int32_t t : ids) valid = valid && t >= 0 && t < mc.vocab_size;
      if (valid) file_prompts.push_back(std::move(ids));
    }
    if (file_prompts.empty())
      return Status::InvalidArgument(prompts_path + ": no usable prompt_ids lines");
    rep.prompt_source = fmt::format("{} prompts of `{}` from {} (their last {} tokens)", file_prompts.size(),
                                    workload_name, prompts_path, a.prompt_tokens);
  } else {
    rep.prompt_source = fmt::format("random token ids ({} not found)", prompts_path);
  }
  size_t next_prompt = 0;
  auto random_prompt = [&] {
    if (!file_prompts.empty()) return file_prompts[next_prompt++ % file_prompts.size()];
    std::vector<int32_t> p(a.prompt_tokens);
    for (auto& t : p) t = static_cast<int32_t>(rng() % mc.vocab_size);
    return p;
  };
  Note(progress, "profiles from {}; prompts: {}", table_path, rep.prompt_source);
  Note(progress, "calibrating profiles on the KV of a {}-token prefill", a.prompt_tokens);
  (void)(*model)->Prefill(random_prompt());  // warm caches
  const double prefill_start = NowSeconds();
  auto calibration_prefill = (*model)->Prefill(random_prompt());
  if (!calibration_prefill.ok()) return calibration_prefill.status();
  const double prefill_seconds = NowSeconds() - prefill_start;
  const KvView kv = calibration_prefill->kv.view();
  {
    // The machine's own noise: the same prefill, repeated in this process.
    const std::vector<int32_t> prompt = random_prompt();
    rep.bare_prefill_min = kInfinity;
    for (int i = 0; i < 8; ++i) {
      const double start = NowSeconds();
      if (!(*model)->Prefill(prompt).ok()) break;
      const double seconds = NowSeconds() - start;
      rep.bare_prefill_min = std::min(rep.bare_prefill_min, seconds);
      rep.bare_prefill_max = std::max(rep.bare_prefill_max, seconds);
    }
  }
  rep.kv_bytes = static_cast<double>(kv.LogicalBytes());
  // Candidates: the table's rows, then the report's pipelines not in it
  // (their quality: the reported one for this workload only).
  std::vector<ProfileCost> candidates;
  for (int i = 1; i < source_table->size(); ++i) candidates.push_back(source_table->profile(i));
  for (const auto& [spec, quality] : reported) {
    auto parsed = Profile::Parse(spec);
    if (!parsed.ok() || parsed->ToString() == "identity+raw+pack") continue;
    bool known = false;
    for (const ProfileCost& c : candidates) {
      auto q = Profile::Parse(c.spec);
      known = known || (q.ok() && *q == *parsed);
    }
    if (known) continue;
    ProfileCost row;
    row.spec = parsed->ToString();
    for (const std::string& w : source_table->workloads()) row.quality[w] = 0.0;  // unknown: infeasible
    row.quality[workload_name] = quality;
    candidates.push_back(row);
  }
  std::vector<ProfileCost> rows;
  for (const ProfileCost& src : candidates) {
    auto measured = Calibrate(src.spec, kv, 2, head_scores.get());
    if (!measured.ok()) {
      rep.calibration_notes.push_back(fmt::format("`{}` left out: {}", src.spec, measured.status().ToString()));
      continue;
    }
    measured->quality = src.quality;
    rows.push_back(*measured);
    Note(progress, "  {}: CR {:.2f}, encode {:.2f} GB/s, decode {:.2f} GB/s", src.spec,
             measured->compression_ratio, measured->encode_bytes_per_second / 1e9,
             measured->decode_bytes_per_second / 1e9);
  }
  auto table = ProfileTable::FromRowsAndWorkloads(rows, source_table->workloads());
  if (!table.ok()) return table.status();
  rep.table = *table;
  const int workload = *table->WorkloadIndex(workload_name);
  const LatencyModel latency{LatencyModelKind::kStreamed, mc.layers};

  // Baseline presets: their quality is the table's when the table lists the
  // same pipeline, else unknown.
  auto quality_of = [&](const std::string& spec) -> double {
    if (spec == "none") return 1.0;
    auto p = Profile::Parse(spec);
    for (int i = 1; p.ok() && i < table->size(); ++i) {
      auto q = Profile::Parse(table->profile(i).spec);
      if (q.ok() && *q == *p) return table->Quality(i, workload);
    }
    return -1.0;
  };
  std::vector<ProfileCost> baselines;
  for (const char* preset : {"kivi-2", "cachegen"}) {
    auto measured = Calibrate(preset, kv, 2, head_scores.get());
    if (!measured.ok()) return measured.status().WithContext(preset);
    baselines.push_back(*measured);
  }

  // --- Bandwidth range from the latency model.
  std::vector<int> eligible;
  double b_star = 0;
  for (int i = 1; i < table->size(); ++i) {
    if (table->Quality(i, workload) < a.quality_min) continue;
    eligible.push_back(i);
    b_star = std::max(b_star, BenefitThresholdForSize(latency, table->profile(i), rep.kv_bytes));
  }
  for (const ProfileCost& b : baselines)
    b_star = std::max(b_star, BenefitThresholdForSize(latency, b, rep.kv_bytes));
  if (!(b_star > 0) || !std::isfinite(b_star)) b_star = GbpsToBytesPerSecond(100.0);
  // Where sending raw KV takes as long as the prefill that produced it.
  const double b_cross = rep.kv_bytes / std::max(prefill_seconds, 1e-6);
  // --- The prefill worker (this process) and its client.
  auto tcp = NewTcpTransport();
  auto pool = NewMemoryPool({.budget_bytes = uint64_t{2} << 30});
  PrefillWorkerOptions po;
  po.decode_addresses = {decode.address()};
  po.client_connection.secret = secret;
  po.client_connection.local_id = "prefill";
  po.decode_connection = po.client_connection;
  po.decode_connection.io_timeout_seconds = 120;
  po.model_id = std::filesystem::path(*dir).filename().string();
  po.controller.model = latency;
  po.overlap_prefill = a.overlap_prefill;
  rep.overlap_prefill = a.overlap_prefill;
  po.pool = pool.get();
  po.head_scores = head_scores.get();
  po.pool_store_profiles = {"none"};
  for (int i : eligible) po.pool_store_profiles.push_back(table->profile(i).spec);
  auto prefill = PrefillWorker::Start(tcp.get(), model->get(), *table, po);
  if (!prefill.ok()) return prefill.status();
  ServeClientOptions co;
  co.prefill_addresses = {(*prefill)->address()};
  co.connection.secret = secret;
  co.connection.local_id = "router";
  ServeClient client(tcp.get(), co);
  uint64_t next_id = 1;
  auto submit = [&](const std::string& method, const std::vector<int32_t>& prompt,
                    bool use_pool) -> Result<ServeResponse> {
    ServeRequest r;
    r.id = next_id++;
    r.workload = workload_name;
    r.prompt = prompt;
    r.max_new_tokens = a.new_tokens;
    r.quality_min = a.quality_min;
    r.method = method;
    r.use_pool = use_pool;
    return client.Submit(r);
  };

  // What the unshaped localhost link sustains (raw transfers): the top of
  // the sweep stays below it, or shaping would not be what limits the rate.
  (*prefill)->SetLinkRate(0);
  for (int i = 0; i < 3; ++i) {
    auto response = submit("none", random_prompt(), false);
    if (!response.ok() || !response->status.ok())
      return response.ok() ? response->status : response.status();
  }
  const double unshaped = (*prefill)->BandwidthEstimate();
  Note(progress, "prefill {:.0f} ms for {} tokens; raw KV {}; unshaped goodput {:.2f} Gbps",
           prefill_seconds * 1e3, a.prompt_tokens, HumanBytes(static_cast<uint64_t>(rep.kv_bytes)),
           BytesPerSecondToGbps(unshaped));
  double lo = a.min_gbps > 0 ? a.min_gbps : BytesPerSecondToGbps(b_cross) / 3;
  double hi = a.max_gbps > 0 ? a.max_gbps
                             : std::min({BytesPerSecondToGbps(std::max(b_star, 16 * b_cross)),
                                         std::max(0.6 * BytesPerSecondToGbps(unshaped),
                                                  16 * BytesPerSecondToGbps(b_cross)),
                                         40.0});
  lo = std::max(lo, 0.005);
  if (hi <= lo * 2) hi = lo * 8;
  rep.range_reason = fmt::format(
      "Two bandwidths from the latency model bound the interesting range for this model and "
      "prompt (V = {}). B_cross = V / T_prefill = {:.3g} Gbps is where sending the raw KV takes "
      "as long as the prefill that made it ({:.0f} ms measured): well below it a request is "
      "transfer-bound. B* = {:.3g} Gbps is the largest break-even bandwidth B*(V) of the "
      "profiles (streamed model, {} layers, t0 included): above it sending raw beats every "
      "profile, and from about 16 B_cross on the KV movement is a small part of the JCT "
      "(compute-bound). The sweep runs from B_cross/3 = {:.3g} Gbps to min(max(B*, 16 B_cross), "
      "max(16 B_cross, 0.6 x the unshaped localhost goodput, measured {:.3g} Gbps), 40) = {:.3g} "
      "Gbps, {} points spaced geometrically: it always reaches 16 B_cross, and goes beyond only "
      "as far as the token bucket, not the loopback, stays the bottleneck.",
      HumanBytes(static_cast<uint64_t>(rep.kv_bytes)), BytesPerSecondToGbps(b_cross),
      prefill_seconds * 1e3, BytesPerSecondToGbps(b_star), mc.layers, lo,
      BytesPerSecondToGbps(unshaped), hi, a.points);
  std::vector<double> sweep;
  for (int i = 0; i < a.points; ++i)
    sweep.push_back(a.points == 1 ? lo : lo * std::pow(hi / lo, static_cast<double>(i) / (a.points - 1)));

  // Best static: the one floor-feasible profile with the least predicted
  // total over the sweep (a static deployment tuned with hindsight).
  int best_static = ProfileTable::kRaw;
  double best_total = kInfinity;
  for (int i : eligible) {
    double total = 0;
    for (double g : sweep)
      total += PredictSeconds(latency, table->profile(i), rep.kv_bytes, GbpsToBytesPerSecond(g));
    if (total < best_total) best_total = total, best_static = i;
  }
  const std::string best_spec = table->profile(best_static).spec;
  rep.methods = {{"raw", "none", "none", 1.0},
                 {"kivi-2", "kivi-2", "kivi-2", quality_of("kivi-2")},
                 {"cachegen", "cachegen", "cachegen", quality_of("cachegen")},
                 {"best static", best_spec, best_spec, table->Quality(best_static, workload)},
                 {"kvserve", kMethodAdaptive, "chosen per request", -1}};

  // --- Sweep.
  for (double gbps : sweep) {
    (*prefill)->SetLinkRate(GbpsToBytesPerSecond(gbps));
    E2ePoint point;
    point.gbps = gbps;
    point.samples.resize(rep.methods.size());
    point.failures.assign(rep.methods.size(), 0);
    const double point_start = NowSeconds();
    for (int round = -1; round < a.requests; ++round) {  // round -1 warms the link estimate
      const std::vector<int32_t> prompt = random_prompt();
      // Methods in a fresh random order per round: no method always runs
      // first (cold) or right after another one's generation.
      std::vector<size_t> order(rep.methods.size());
      for (size_t m = 0; m < order.size(); ++m) order[m] = m;
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t m : order) {
        auto response = submit(rep.methods[m].method, prompt, false);
        if (!response.ok()) return response.status();
        if (round < 0) continue;
        if (!response->status.ok()) {
          point.failures[m]++;
          Note(progress, "  {} failed: {}", rep.methods[m].label, response->status.ToString());
          continue;
        }
        point.samples[m].push_back(response->timings);
      }
    }
    std::string line;
    for (size_t m = 0; m < rep.methods.size(); ++m)
      line += fmt::format("{} {:.0f} ms  ", rep.methods[m].label, MeanJct(point, m) * 1e3);
    Note(progress, "{:.3g} Gbps ({:.0f} s): mean JCT {}", gbps, NowSeconds() - point_start, line);
    rep.points.push_back(std::move(point));
  }

  // --- Prefix pool: TTFT of a hit vs recomputing.
  for (double gbps : {sweep.front(), sweep[sweep.size() / 2], sweep.back()}) {
    (*prefill)->SetLinkRate(GbpsToBytesPerSecond(gbps));
    for (int i = 0; i < a.prefix_prompts; ++i) {
      const std::vector<int32_t> prompt = random_prompt();
      // Same document, another question: the first prompt with its last
      // half replaced by another prompt's tokens.
      std::vector<int32_t> shared = prompt;
      const std::vector<int32_t> other = random_prompt();
      const size_t tail = std::max<size_t>(1, std::min(shared.size(), other.size()) / 2);
      std::copy(other.end() - static_cast<std::ptrdiff_t>(tail), other.end(),
                shared.end() - static_cast<std::ptrdiff_t>(tail));
      auto miss = submit(kMethodAdaptive, prompt, true);
      auto hit = submit(kMethodAdaptive, prompt, true);
      auto partial = submit(kMethodAdaptive, shared, true);
      if (!miss.ok() || !hit.ok() || !partial.ok() || !miss->status.ok() || !hit->status.ok() ||
          !partial->status.ok()) {
        Note(progress, "  prefix request failed");
        continue;
      }
      E2ePrefix p;
      p.gbps = gbps;
      p.ttft_recompute = miss->timings.ttft_seconds;
      p.ttft_hit = hit->timings.ttft_seconds;
      p.hit_profile = hit->timings.prefix_hit ? hit->timings.profile : "recompute";
      p.hit_chunks = hit->timings.prefix_chunks;
      p.ttft_shared = partial->timings.ttft_seconds;
      p.shared_profile = partial->timings.prefix_hit ? partial->timings.profile : "recompute";
      p.shared_chunks = partial->timings.prefix_chunks;
      p.shared_tail = static_cast<int>(tail);
      rep.prefix.push_back(p);
    }
    Note(progress, "prefix pool at {:.3g} Gbps: TTFT recompute {:.0f} ms, hit {:.0f} ms ({})", gbps,
             rep.prefix.empty() ? 0 : rep.prefix.back().ttft_recompute * 1e3,
             rep.prefix.empty() ? 0 : rep.prefix.back().ttft_hit * 1e3,
             rep.prefix.empty() ? "-" : rep.prefix.back().hit_profile);
  }

  // --- The link changes under the controller: high, low, high.
  const double phases[3] = {sweep.back(), sweep.front(), sweep.back()};
  for (int i = 0; i < a.switch_requests; ++i) {
    const double gbps = phases[std::min(2, 3 * i / std::max(1, a.switch_requests))];
    if (i == 0 || gbps != phases[std::min(2, 3 * (i - 1) / std::max(1, a.switch_requests))])
      (*prefill)->SetLinkRate(GbpsToBytesPerSecond(gbps));
    auto response = submit(kMethodAdaptive, random_prompt(), false);
    if (!response.ok() || !response->status.ok()) continue;
    E2eSwitch s;
    s.index = i;
    s.gbps = gbps;
    s.estimate_gbps = BytesPerSecondToGbps(response->timings.bandwidth_estimate);
    s.profile = response->timings.profile;
    s.jct = response->timings.jct_seconds;
    s.kv_seconds = response->timings.kv_seconds;
    rep.switches.push_back(s);
  }
  Note(progress, "bandwidth-change run: {} requests", rep.switches.size());
  (*prefill)->Stop();
  decode.Stop();

  rep.seconds = NowSeconds() - run_start;
  Note(progress, "done in {:.0f} s", rep.seconds);
  return rep;
}

}  // namespace kvserve::lab
