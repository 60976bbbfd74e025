// Copyright kvserve authors. Rendering of `kvserve e2e` results.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "experiments/e2e.h"

namespace kvserve::lab {
namespace {

std::vector<double> Field(const std::vector<RequestTimings>& v, double RequestTimings::*f) {
  std::vector<double> out;
  for (const auto& t : v) out.push_back(t.*f);
  return out;
}

std::string Ms(double seconds) { return fmt::format("{:.1f}", seconds * 1e3); }

// Best (lowest mean JCT) of the static methods (every method but adaptive)
// that meet the floor, at `point`; -1 if none.
int BestStatic(const E2eReport& r, const E2ePoint& point) {
  int best = -1;
  for (size_t m = 0; m < r.methods.size(); ++m) {
    if (r.methods[m].method == kMethodAdaptive || point.samples[m].empty()) continue;
    if (r.methods[m].quality < r.quality_min && r.methods[m].method != "none") continue;
    if (best < 0 || MeanJct(point, m) < MeanJct(point, best)) best = static_cast<int>(m);
  }
  return best;
}

// The ratio of method a's mean JCT to method b's with a 95% interval from
// the per-round paired differences (same prompt, same minute): "1.02x
// [0.99, 1.05]". Without the interval when a failure broke the pairing.
std::string PairedRatio(const E2ePoint& point, size_t a, size_t b) {
  const auto& x = point.samples[a];
  const auto& y = point.samples[b];
  const double mean_b = MeanJct(point, b);
  const double ratio = MeanJct(point, a) / mean_b;
  if (x.size() != y.size() || x.size() < 3) return fmt::format("{:.2f}x", ratio);
  std::vector<double> d;
  for (size_t i = 0; i < x.size(); ++i) d.push_back(x[i].jct_seconds - y[i].jct_seconds);
  const double mean = Mean(d);
  double ss = 0;
  for (double v : d) ss += (v - mean) * (v - mean);
  const double half = 1.96 * std::sqrt(ss / static_cast<double>(d.size() - 1) / static_cast<double>(d.size()));
  return fmt::format("{:.2f}x [{:.2f}, {:.2f}]", ratio, ratio - half / mean_b, ratio + half / mean_b);
}

size_t AdaptiveIndex(const E2eReport& r) {
  for (size_t m = 0; m < r.methods.size(); ++m)
    if (r.methods[m].method == kMethodAdaptive) return m;
  return r.methods.size() - 1;
}

// The part of docs/e2e.md that does not depend on the run.
constexpr const char* kHowItWorks = R"(
## How it works

### Processes and commands

```
kvserve serve --role decode  --listen 127.0.0.1:7500                    # decode worker
kvserve serve --role prefill --listen 127.0.0.1:7600 --decode 127.0.0.1:7500 \
              [--shape-gbps 2] [--pool memory|redis] \
              [--table docs/e2e_profile_table.json]                      # prefill worker
kvserve router --prefill 127.0.0.1:7600 -n 16 --workload qa --slo-ms 500 --quality-min 0.97
kvserve e2e                                                              # this report
```

`--table` defaults to the model's measured table, `configs/profiles/<model>-unified.json` (no
such table is an error: pass one; `configs/profile_table.example.json` holds hand-written,
unmeasured numbers); requests that name no workload get `unified` (`--workload`). The table
`kvserve e2e` calibrates on this machine is `docs/e2e_profile_table.json`. Profiles that need
per-head scores (mixhq, duo) use `<model>/head_scores.json` when the model ships one.
All of them take the shared secret from `--secret-file` or `$KVSERVE_SECRET` and the model from
`--model DIR` (default: the first directory under `models/`; none there is an error), or
`--model random` for a random-weight Qwen2 model written once under the temp directory
(`FallbackModelSpec` in `src/experiments/include/experiments/model_directory.h`; meaningless
output, for plumbing tests).
The library is `include/kvserve/serve.h` / `src/serve/`: `PrefillWorker`, `DecodeWorker`,
`ServeClient`.

### Protocol

Over the authenticated, checksummed connections of `docs/transport.md`, user message types:

| type | name | from → to | payload |
| ---: | --- | --- | --- |
| 0x30 | REQUEST | client → prefill | JSON: id, workload, prompt ids, max_new_tokens, slo_seconds, quality_min, method (`adaptive` or a profile), sampling, use_pool |
| 0x31 | RESPONSE | prefill → client | JSON: id, status {code, message}, tokens, timings |
| 0x10–0x14 | FRAME_* | prefill → decode | the KV frame, streamed record by record (`docs/transport.md` §4) |
| 0x32 | GENERATE | prefill → decode | u32 JSON length, JSON (id, transfer ids (1..4096), KV token ids, suffix ids, sampling, logits count), f32 logits of the last prompt token |
| 0x33 | RESULT | decode → prefill | JSON: id, status, tokens, decode-of-KV, generation and first-token seconds |
| 0x34 | POOL_FETCH | prefill → decode | JSON: id, first transfer id, the hit's chunk keys (1..4096, each the pool's key encoding in hex) |
| 0x35 | POOL_FETCHED | decode → prefill | JSON: id, status, chunks held, their frame bytes, fetch and decode seconds, and the fetch's seconds outside reading records (wait) |

A request's frames (one; or one per pool chunk on a prefix hit) are followed by exactly one
GENERATE naming their transfer ids in order. On a prefix hit, a decode worker that has the
pool itself (`DecodeWorkerOptions::pool`, `--pool` of `kvserve serve decode`/`kvserve.pd`)
is sent POOL_FETCH and fetches the chunks from the pool in one request (`KvPool::GetRecordsInOrder`,
the pool's GET_FRAMES: chunk i+1 streams as soon as chunk i is acknowledged), each record decoded
into its cache as it arrives (`PoolFrameSource` + `ReceiveKvWith`): the KV crosses only the
pool's link, and POOL_FETCHED says how many chunks it holds. A decode worker without the pool
answers NotSupported, and the prefill worker relays to it from then on: each chunk record by
record (`KvPool::GetRecords`), every record the pool delivers going on to the decode worker at
once, so the pool link and the decode link work together and no chunk is held whole by the
prefill worker, and the next chunk is fetched and forwarded while the decode worker finishes
the last one (`FrameSender::End`, its ack read after the next chunk went out: a wait per chunk
for its ack idled both links once per chunk). Either way a chunk the pool cannot give (evicted
since the lookup) ends the hit there, and the GENERATE names the chunks held, the rest of the
prompt going in its suffix (none: the request recomputes). A chunk lost mid-transfer drops the
attempt's chunks and the attempt is retried. The decode worker decodes each record as it
arrives (`DecoderContext::DecodeRecord` in the receive callback), and generates only when the
frames it holds since the last GENERATE are exactly those named, each complete and verified:
every record passed its checksum and the record count equals the header's chunk count. Their
KV is concatenated along tokens. Otherwise RESULT carries Corruption and no tokens.

### Stages and timings (per request, `RequestTimings`)

| field | measured where | what |
| --- | --- | --- |
| queue | prefill worker | arrival to the request's turn (a worker runs one prefill and KV transfer at a time; up to `max_decode_connections` requests then await their decode results at once) |
| prefill | prefill worker | `Model::Prefill` of the prompt (0 on a prefix hit) |
| pool fetch | decode / prefill worker | prefix hit: its chunks' movement, the first pool request to the last chunk decoded (the decode worker's own fetch) or to the decode worker's last ack (a relay) |
| encode | prefill worker | time inside the encoder (`Begin`, each `EncodeLayer`, `Finish`) |
| transfer | prefill worker | sender busy time: blocked in writes (the shaper, the socket) plus the drain to the receiver's ack |
| decode KV | decode worker | time inside `DecodeRecord` |
| generation | decode worker | KV import + token generation |
| KV | prefill worker | encode start to the receiver's ack: the KV-movement latency the bandit observes |
| TTFT | prefill + decode | request arrival at the prefill worker (queue included) to the first token |
| after first token | decode worker | its first token to its last (a client's TTFT is its JCT less this) |
| JCT | client | submit to response |

Prefill, encoding and sending overlap (`PrefillWorkerOptions::overlap_prefill`, on by
default; `kvserve e2e --no-overlap` turns it off): the model's per-layer callback copies each
layer's K/V into a staging cache as soon as the layer is computed, an encode thread encodes it
while the model computes the next layer, a sender thread writes the records (at most 4 layers
queued), and the receiver decodes records as they arrive. The KV time fed to the bandit is
encode start to the receiver's ack less the time the sender sat idle while the encoder waited
for the prefill's next layer, so it stays what the controller's streamed latency model
(`LatencyModelKind::kStreamed`, L = layers) predicts. The choice is unchanged by the overlap:
the time left after the prefill grows with the KV time, so the profile with the least
predicted KV time also leaves the least after the prefill.

### Controller loop

Per adaptive request the prefill worker calls `Controller::Decide` with the workload, V, the
bandwidth estimate of the decode peer (`BandwidthEstimator`, fed by every transfer's goodput
through the connection's goodput callback), the SLO (prefill is estimated from an EWMA of
seconds per prompt token) and the quality floor; after the decode worker's ack it calls
`Controller::Observe` with the measured KV time. Profiles below the floor are never chosen.

### Failures

| failure | what happens | test |
| --- | --- | --- |
| connection to the decode worker dropped mid-transfer | redial (next `--decode` address), re-send; after `max_attempts` (4) a clear Unavailable naming the address and the attempts | `ServeFaultTest.DroppedConnectionIsRetriedOrFailsClearly` |
| bytes corrupted on the wire | the message checksum breaks the connection; redial and re-send; never imported | `ServeFaultTest.CorruptedBytesOnTheWireAreNeverImported` |
| a record truncated, a byte flipped under a valid message checksum, a record missing | the decode worker refuses the frame (ack carries Corruption) and answers the GENERATE with Corruption; the prefill worker re-sends | `ServeSecurityTest.MalformedRecordsAreRefusedAndNeverGeneratedFrom` |
| slow consumer | back-pressure blocks the sender; memory bounded | `ServeFaultTest.SlowConsumerStillGetsTheRightKv` |
| decode worker process killed mid-transfer | fail over to the next decode worker, re-send the KV (kept until the result arrives) | `ServeProcessTest.DecodeWorkerKilledMidTransferFailsOver` |
| no decode worker reachable | Unavailable naming the address | `ServeFaultTest.NoDecodeWorkerFailsClearly` |
| prefill worker lost | the client re-submits (re-prefill) on the next prefill worker | `ServeFaultTest.LostPrefillWorkerIsRePrefilledElsewhere` |
| Redis restarted / down under the pool | lookups and stores fail → the request recomputes; stores resume when Redis is back | `ServeRedisTest.RedisRestartedUnderThePoolEveryRequestCompletes` |
| peer without the secret (either hop) | refused (PermissionDenied), counted | `ServeSecurityTest.PeersWithoutTheSecretAreRefused` |
| 2^40-byte declared length, random bytes (before and after auth) | connection dropped before allocating; RSS stays bounded | `ServeSecurityTest.HugeDeclaredLengthAndRandomBytesAreRejectedWithBoundedMemory` |

With the lossless profile every completed request is checked token for token against a
single-process prefill + decode (`ServePdTest.LosslessOverTcpMatchesOneProcess`, greedy and
seeded sampling); `tests/serve_cli_test.sh` runs `kvserve serve` and `kvserve router` as real
processes. `ctest -L serve` runs all of them (about 10 s).

### Limits

- One request at a time per prefill worker (the model uses every core); no batching.
- The pool stores only full chunks of C tokens of the prefix; the tokens after the last full
  chunk (at least the last prompt token) run on the decode worker on a hit, and a hit's new
  tail chunks are not stored (only a miss stores chunks).
- Qualities in the controller's table come from the table files (measured on whole prompts
  by `kvserve profile` and `kvserve quality`), not from this run; the run's prompts are the
  last tokens of held-out prompts of the workload.
- Bandwidth is emulated by the sender's token bucket on loopback; the tc/netns check of that
  emulation is `tests/netns_shaping_test.sh` (docs/transport.md §6).
)";

}  // namespace

double MeanJct(const E2ePoint& point, size_t method) {
  return Mean(Field(point.samples[method], &RequestTimings::jct_seconds));
}

std::string E2eMarkdown(const E2eReport& r) {
  std::string md;
  md += "# End-to-end results: disaggregated serving over a shaped link\n\n";
  md += "<!-- Written by `kvserve e2e`; rerun it to regenerate. -->\n\n";
  md += "What the numbers below are: real requests through a prefill worker (this process) and a "
        "decode worker (a separate `kvserve serve --role decode` process) joined by "
        "authenticated TCP on localhost, whose sender paces every byte with a token bucket set "
        "to the bandwidth of the point. Every request runs the model's prefill, encodes its KV "
        "layer by layer with the method's profile while a sender thread streams the chunk "
        "records, the decode worker decodes each record as it arrives, imports the KV and "
        "generates. Times are wall-clock, measured, not modelled. The protocol, the stages and "
        "the failure handling are described in the last sections.\n\n";
  md += fmt::format("```\n$ {}\n```\n\n", r.command);
  md += fmt::format("- Machine: {}.\n", r.machine);
  md += fmt::format("- Model: {} — {}.\n", r.model_note, r.model_shape);
  md += fmt::format("- Requests: {} prompt tokens ({}), {} generated tokens (greedy), workload "
                    "`{}`, quality floor {}; V = {} of f32 KV per request; {} requests per method "
                    "and bandwidth after one warm-up round; every round sends one prompt through "
                    "every method, in a fresh random order.\n",
                    r.prompt_tokens, r.prompt_source, r.new_tokens, r.workload, r.quality_min,
                    HumanBytes(static_cast<uint64_t>(r.kv_bytes)), r.requests);
  md += fmt::format("- Profiles: {}{}.\n", r.table_source,
                    r.report_source.empty() ? ""
                                            : fmt::format(", plus the pipelines measured in {} (their "
                                                          "quality for `{}`: the lower end of each 95% interval, as in the tables)",
                                                          r.report_source, r.workload));
  md += r.overlap_prefill
            ? "- The prefill worker streams each layer's KV as soon as the model has computed it, "
              "so encode and transfer overlap the rest of the prefill.\n"
            : "- The prefill worker sends the KV after the prefill (no overlap).\n";
  if (r.pinned)
    md += "- The prefill worker (this process, with its codec and sender threads) is pinned to CPU "
          "0 and the decode worker process to CPU 1, as if on two machines.\n";
  md += fmt::format("- Run time: {:.0f} s.\n\n", r.seconds);

  md += "## Profiles, calibrated on this machine\n\n";
  md += "The controller chooses from the profiles of the table, re-measured here on the real KV "
        "of the model (one codec thread; CR counts every byte of the frame; t0 is what a "
        "16-token request costs beyond its share of the throughput). Qualities are the table's "
        "(not re-measured; measured on whole prompts of the workload by `kvserve profile` / "
        "`kvserve quality`: with held-out scoring, the lower end of the 95% interval on samples "
        "no search saw). Written to `" + r.table_path + "`.\n\n";
  md += "| profile | CR | encode GB/s | decode GB/s | t0 (ms) | quality (" + r.workload + ") |\n";
  md += "| --- | ---: | ---: | ---: | ---: | ---: |\n";
  auto w = r.table.WorkloadIndex(r.workload);
  for (int i = 1; i < r.table.size(); ++i) {
    const ProfileCost& p = r.table.profile(i);
    md += fmt::format("| `{}` | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {} |\n", p.spec, p.compression_ratio,
                      p.encode_bytes_per_second / 1e9, p.decode_bytes_per_second / 1e9,
                      p.overhead_seconds * 1e3,
                      w.ok() ? fmt::format("{:.3f}", r.table.Quality(i, *w)) : "-");
  }
  for (const auto& note : r.calibration_notes) md += "\n- " + note;
  md += "\n\n## Bandwidth range\n\n" + r.range_reason + "\n\n";

  md += "## Job completion time per bandwidth\n\n";
  md += "Mean / p50 / p99 JCT in ms (client submit to response). Methods: raw = no "
        "compression; `kivi-2`, `cachegen` = the presets; best static = the one floor-feasible "
        "profile of the table with the least predicted total over the sweep; kvserve = the "
        "controller choosing per request from the measured bandwidth. A method whose table "
        "quality is below the floor is marked ✗ (its quality unknown: ?).\n\n";
  md += "| Gbps |";
  for (const auto& m : r.methods) {
    std::string mark = m.method == kMethodAdaptive || m.method == "none" ? ""
                       : m.quality < 0                                    ? " ?"
                       : m.quality < r.quality_min                        ? " ✗"
                                                                          : "";
    md += " " + m.label + mark + " |";
  }
  md += " kvserve vs best static | kvserve vs raw |\n| ---: |";
  for (size_t m = 0; m < r.methods.size() + 2; ++m) md += " ---: |";
  md += "\n";
  const size_t adaptive = AdaptiveIndex(r);
  for (const auto& p : r.points) {
    md += fmt::format("| {:.3g} |", p.gbps);
    for (size_t m = 0; m < r.methods.size(); ++m) {
      auto jct = Field(p.samples[m], &RequestTimings::jct_seconds);
      md += fmt::format(" {} / {} / {}{} |", Ms(Mean(jct)), Ms(Percentile(jct, 0.5)),
                        Ms(Percentile(jct, 0.99)),
                        p.failures[m] ? fmt::format(" ({} failed)", p.failures[m]) : "");
    }
    const int best = BestStatic(r, p);
    md += best >= 0 ? fmt::format(" {} ({}) |", PairedRatio(p, adaptive, static_cast<size_t>(best)),
                                  r.methods[best].label)
                    : " - |";
    md += fmt::format(" {} |\n", PairedRatio(p, adaptive, 0));
  }
  md += "\n\"vs\" columns: kvserve's mean JCT divided by the other's (< 1 is faster), with a 95% "
        "interval from the per-round paired differences (each round sends one prompt through "
        "every method); best static is the fastest floor-feasible fixed method at that point, "
        "chosen with hindsight among four noisy means, which favours it.";
  md += fmt::format(
      " Before the sweep, 8 bare prefills of one prompt in the prefill worker's process took "
      "{} to {} ms: the JCT of methods whose KV movement is hidden under the prefill differs by "
      "that machine noise alone; the KV-movement table below isolates what the methods change.\n\n",
      Ms(r.bare_prefill_min), Ms(r.bare_prefill_max));
  // KV-movement time alone: what the methods differ in, without the noise
  // of prefill and generation on a shared machine.
  md += "Mean KV-movement time in ms (encode start to the decode worker's ack, less the time "
        "the pipeline waited for the prefill's next layer: what the latency model predicts and "
        "the bandit learns from), the part of the JCT the methods differ in:\n\n| Gbps |";
  for (const auto& m : r.methods) md += " " + m.label + " |";
  md += "\n| ---: |";
  for (size_t m = 0; m < r.methods.size(); ++m) md += " ---: |";
  md += "\n";
  for (const auto& p : r.points) {
    md += fmt::format("| {:.3g} |", p.gbps);
    for (size_t m = 0; m < r.methods.size(); ++m)
      md += " " + Ms(Mean(Field(p.samples[m], &RequestTimings::kv_seconds))) + " |";
    md += "\n";
  }
  // Quality floors, checked against the table for every adaptive request:
  // the sweep's, the bandwidth-change run's and the prefix hits'.
  {
    int total = 0, below = 0;
    auto wi = r.table.WorkloadIndex(r.workload);
    auto check = [&](const std::string& spec) {
      ++total;
      double q = 1.0;  // raw ("none") and recomputing are lossless
      for (int i = 1; i < r.table.size(); ++i)
        if (r.table.profile(i).spec == spec) q = wi.ok() ? r.table.Quality(i, *wi) : -1;
      below += q < r.quality_min;
    };
    for (const auto& p : r.points)
      for (const auto& t : p.samples[AdaptiveIndex(r)]) check(t.profile);
    for (const auto& s : r.switches) check(s.profile);
    for (const auto& p : r.prefix) {
      check(p.hit_profile);
      check(p.shared_profile);
    }
    md += fmt::format("\nQuality floor: {} of {} kvserve requests (the sweep, the bandwidth-change run "
                      "and the prefix hits) used a profile whose table quality for `{}` is below {} "
                      "(checked per request against the profile table).\n\n",
                      below, total, r.workload, r.quality_min);
  }
  md += fmt::format("![JCT vs bandwidth]({})\n\n",
                    std::filesystem::path(r.plot_jct_path).filename().string());

  // What kvserve chose, and the model's prediction at the lowest bandwidth.
  md += "### What kvserve chose\n\n| Gbps | profiles chosen (requests) | predicted speedup over raw | measured |\n| ---: | --- | ---: | ---: |\n";
  for (const auto& p : r.points) {
    std::map<std::string, int> chosen;
    for (const auto& t : p.samples[adaptive]) chosen[t.profile]++;
    std::string list;
    for (const auto& [spec, n] : chosen) list += fmt::format("`{}` ({}) ", spec, n);
    // Prediction: same measured prefill and generation, KV time from the
    // calibrated streamed model at the nominal rate.
    const double prefill = Mean(Field(p.samples[0], &RequestTimings::prefill_seconds));
    const double generation = Mean(Field(p.samples[0], &RequestTimings::generation_seconds));
    const double bw = GbpsToBytesPerSecond(p.gbps);
    double predicted_kv = 0;
    for (const auto& t : p.samples[adaptive]) {
      double kv = r.kv_bytes / bw;
      for (int i = 1; i < r.table.size(); ++i)
        if (r.table.profile(i).spec == t.profile)
          kv = PredictSeconds({LatencyModelKind::kStreamed, r.layers}, r.table.profile(i), r.kv_bytes, bw);
      predicted_kv += kv / static_cast<double>(p.samples[adaptive].size());
    }
    // With the overlap, the KV movement of layer l starts when the prefill
    // has computed it: what remains after the prefill is the larger of the
    // last layer's share and the KV time beyond the prefill's (L-1)/L.
    auto exposed = [&](double kv) {
      if (!r.overlap_prefill) return kv;
      const double layers = std::max(1, r.layers);
      return std::max(kv / layers, kv - prefill * (layers - 1) / layers);
    };
    const double predicted = (prefill + exposed(r.kv_bytes / bw) + generation) /
                             (prefill + exposed(predicted_kv) + generation);
    md += fmt::format("| {:.3g} | {}| {:.2f}x | {:.2f}x |\n", p.gbps, list, predicted,
                      MeanJct(p, 0) / MeanJct(p, adaptive));
  }

  md += "\n## Stage breakdown (paper Fig. 15)\n\n";
  md += "Mean seconds per stage in ms at the lowest and the highest bandwidth. The stages "
        "overlap (encode, send and decode run layer by layer in a pipeline), so they do not add "
        "up to the JCT, and with the overlap encode and transfer also run during the prefill; "
        "`KV` is the KV-movement time the bandit learns from (encode start to the decode "
        "worker's acknowledgement, after its last record decoded, less the time spent waiting "
        "for the prefill's next layer).\n\n";
  md += "| Gbps | method | prefill | encode | transfer | decode KV | generation | KV | JCT | frame |\n";
  md += "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const E2ePoint* p : {&r.points.front(), &r.points.back()}) {
    for (size_t m = 0; m < r.methods.size(); ++m) {
      const auto& s = p->samples[m];
      md += fmt::format("| {:.3g} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", p->gbps,
                        r.methods[m].label, Ms(Mean(Field(s, &RequestTimings::prefill_seconds))),
                        Ms(Mean(Field(s, &RequestTimings::encode_seconds))),
                        Ms(Mean(Field(s, &RequestTimings::transfer_seconds))),
                        Ms(Mean(Field(s, &RequestTimings::decode_kv_seconds))),
                        Ms(Mean(Field(s, &RequestTimings::generation_seconds))),
                        Ms(Mean(Field(s, &RequestTimings::kv_seconds))),
                        Ms(Mean(Field(s, &RequestTimings::jct_seconds))),
                        s.empty() ? "-" : HumanBytes(s.front().frame_bytes));
    }
    if (r.points.size() == 1) break;
  }

  md += "\n## Prefix caching: TTFT of a pool hit vs recomputing (paper Fig. 14)\n\n";
  md += fmt::format(
      "The prefill worker keeps an embedded pool; a prompt's prefix (all tokens but the last) "
      "is stored in chunks of C = {} tokens, one frame per full chunk, under raw and every "
      "floor-feasible profile after a miss. On a repeat (or a prompt sharing its first chunks) "
      "the worker predicts, with the controller's latency model at the measured bandwidth, the "
      "time to fetch and decode the stored chunks of each encoding plus the time for the decode "
      "worker to run the rest of the prompt, and the time to recompute, and takes the fastest "
      "that meets the floor. TTFT = request arrival at the prefill worker to the first "
      "token sampled on the decode worker.\n\n",
      PrefillWorkerOptions{}.pool_chunk_tokens);
  md += "Per bandwidth: a new prompt (a miss: prefill, send, store), the same prompt again (a "
        "hit on every full chunk), and a prompt sharing the first half of its tokens with it (the "
        "same document with another question: a hit on the shared chunks, the rest run on the "
        "decode worker).\n\n";
  md += "| Gbps | TTFT recompute (ms) | TTFT repeat (ms) | speedup | repeat used | TTFT shared prefix (ms) | speedup | shared prefix used |\n"
        "| ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n";
  auto used = [](const std::string& profile, int chunks) {
    return profile == "recompute" ? std::string("recompute")
                                  : fmt::format("{} chunks of `{}`", chunks, profile);
  };
  for (const auto& p : r.prefix)
    md += fmt::format("| {:.3g} | {} | {} | {:.2f}x | {} | {} | {:.2f}x | {} |\n", p.gbps,
                      Ms(p.ttft_recompute), Ms(p.ttft_hit),
                      p.ttft_recompute / std::max(p.ttft_hit, 1e-9), used(p.hit_profile, p.hit_chunks),
                      Ms(p.ttft_shared), p.ttft_recompute / std::max(p.ttft_shared, 1e-9),
                      used(p.shared_profile, p.shared_chunks));

  md += "\n## The link changes mid-run\n\n";
  md += "Adaptive requests while the shaped rate goes high → low → high (the controller is not "
        "told; it sees only the goodput of its own transfers).\n\n";
  md += "| request | link Gbps | estimate Gbps | profile | KV (ms) | JCT (ms) |\n| ---: | ---: | ---: | --- | ---: | ---: |\n";
  for (const auto& s : r.switches)
    md += fmt::format("| {} | {:.3g} | {:.3g} | `{}` | {} | {} |\n", s.index, s.gbps, s.estimate_gbps,
                      s.profile, Ms(s.kv_seconds), Ms(s.jct));
  md += fmt::format("\n![bandwidth change]({})\n",
                    std::filesystem::path(r.plot_switch_path).filename().string());
  md += kHowItWorks;
  return md;
}

nlohmann::ordered_json E2eResultsJson(const E2eReport& r) {
  nlohmann::ordered_json out;
  out["format"] = "kvserve-e2e-results";
  out["version"] = 1;
  out["command"] = r.command;
  out["machine"] = r.machine;
  out["prompt_tokens"] = r.prompt_tokens;
  out["workload"] = r.workload;
  out["quality_min"] = r.quality_min;
  out["kv_bytes"] = r.kv_bytes;
  nlohmann::json methods = nlohmann::json::array();
  for (const E2eMethod& m : r.methods)
    methods.push_back({{"label", m.label}, {"method", m.method}, {"spec", m.spec},
                       {"quality", m.quality}, {"adaptive", m.method == kMethodAdaptive}});
  out["methods"] = methods;
  nlohmann::json points = nlohmann::json::array();
  for (const E2ePoint& p : r.points) {
    nlohmann::json means = nlohmann::json::array();
    for (size_t m = 0; m < r.methods.size(); ++m)
      means.push_back(p.samples[m].empty() ? nlohmann::json(nullptr) : nlohmann::json(MeanJct(p, m)));
    points.push_back({{"gbps", p.gbps}, {"mean_jct_seconds", means}, {"failures", p.failures}});
  }
  out["points"] = points;
  nlohmann::json switches = nlohmann::json::array();
  for (const E2eSwitch& s : r.switches)
    switches.push_back({{"index", s.index}, {"gbps", s.gbps}, {"estimate_gbps", s.estimate_gbps},
                        {"profile", s.profile}, {"jct_seconds", s.jct}, {"kv_seconds", s.kv_seconds}});
  out["switches"] = switches;
  nlohmann::json samples = nlohmann::json::array();
  for (const E2ePoint& p : r.points)
    for (size_t m = 0; m < r.methods.size(); ++m)
      for (const RequestTimings& t : p.samples[m])
        samples.push_back({{"gbps", p.gbps}, {"method", r.methods[m].label}, {"profile", t.profile},
                           {"jct", t.jct_seconds}, {"prefill", t.prefill_seconds},
                           {"encode", t.encode_seconds}, {"transfer", t.transfer_seconds},
                           {"kv", t.kv_seconds}, {"decode_kv", t.decode_kv_seconds},
                           {"generation", t.generation_seconds}, {"ttft", t.ttft_seconds}});
  out["samples"] = samples;
  return out;
}

}  // namespace kvserve::lab
