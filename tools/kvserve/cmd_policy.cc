// Copyright kvserve authors. `kvserve policy`: the piecewise-optimal policy
// (paper Theorem 6.2) of a profile table for one workload and quality floor,
// as bandwidth intervals in Gbps, with each profile's benefit threshold B*.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/controller.h"

namespace kvserve::cli {
namespace {

struct PolicyArgs {
  std::string table;
  std::string workload;
  double quality_min = 0.0;
  double kv_mib = 0.0;  // 0: t0 ignored (size-independent policy)
  std::string model = "serial";
  int layers = 32;
};

std::string Gbps(double bytes_per_second) {
  if (std::isinf(bytes_per_second)) return "inf";
  return fmt::format("{:.3g}", BytesPerSecondToGbps(bytes_per_second));
}

int RunPolicy(const PolicyArgs& a) {
  auto fail = [](const Status& s) { return ReportError("policy", s); };
  Result<ProfileTable> table = ProfileTable::Load(a.table);
  if (!table.ok()) return fail(table.status());
  Result<int> w = table->WorkloadIndex(a.workload);
  if (!w.ok()) return fail(w.status());
  LatencyModel model;
  if (a.model == "streamed") {
    model.kind = LatencyModelKind::kStreamed;
  } else if (a.model != "serial") {
    return fail(Status::InvalidArgument("--model must be serial or streamed"));
  }
  model.layers = a.layers;
  const double kv_bytes = a.kv_mib > 0.0 ? a.kv_mib * 1048576.0 : kInfinity;
  Result<std::vector<PolicyInterval>> policy =
      PiecewisePolicy(*table, model, *w, a.quality_min, kv_bytes);
  if (!policy.ok()) return fail(policy.status());

  int eligible = 0;
  for (int p = 1; p < table->size(); ++p) eligible += table->Quality(p, *w) >= a.quality_min;
  fmt::print("workload {}, quality floor {}: {} of {} profiles eligible; {} model{}; ", a.workload,
             a.quality_min, eligible, table->size() - 1, a.model,
             model.kind == LatencyModelKind::kStreamed ? fmt::format(" ({} layers)", a.layers)
                                                       : "");
  if (std::isinf(kv_bytes)) {
    fmt::print("t0 ignored (pass --kv-mib to include it)\n\n");
  } else {
    fmt::print("V = {} MiB, t0 included\n\n", a.kv_mib);
  }
  size_t spec_w = 7;
  for (const PolicyInterval& iv : *policy) {
    spec_w = std::max(spec_w, table->profile(iv.profile).spec.size());
  }
  fmt::print("{:<22}  {:<{}}  {:>6}  {:>9}  {:>11}  {:>8}\n", "bandwidth (Gbps)", "profile",
             spec_w, "cr", "B* (Gbps)", "B*(V) (Gbps)", "quality");
  for (const PolicyInterval& iv : *policy) {
    const ProfileCost& c = table->profile(iv.profile);
    const bool raw = iv.profile == ProfileTable::kRaw;
    fmt::print("{:<22}  {:<{}}  {:>6.2f}  {:>9}  {:>11}  {:>8.4f}\n",
               fmt::format("[{}, {})", Gbps(iv.min_bandwidth), Gbps(iv.max_bandwidth)),
               raw ? "none (raw)" : c.spec, spec_w, c.compression_ratio,
               raw ? "-" : Gbps(BenefitThreshold(c)),
               raw ? "-" : Gbps(BenefitThresholdForSize(model, c, kv_bytes)),
               table->Quality(iv.profile, *w));
  }
  return 0;
}

RunFn SetupPolicy(CLI::App& sub) {
  auto a = std::make_shared<PolicyArgs>();
  sub.description(
      "Print the piecewise-optimal policy of a profile table: for each bandwidth interval "
      "(Gbps, 1 Gbps = 1e9 bit/s) the profile that minimises KV-movement time among those "
      "with quality >= --quality-min, with its benefit threshold B* = (1 - 1/cr) s_p "
      "(Theorem 6.1) and B*(V) including the fixed overhead t0.");
  sub.add_option("table", a->table, "profile table JSON (docs/controller.md)")->required();
  sub.add_option("--workload", a->workload, "workload name in the table")->required();
  sub.add_option("--quality-min", a->quality_min, "quality floor q_min")->required();
  sub.add_option("--kv-mib", a->kv_mib, "request KV size in MiB (includes t0); default: ignore t0");
  sub.add_option("--model", a->model, "latency model: serial | streamed");
  sub.add_option("--layers", a->layers, "layers for the streamed model")->check(CLI::Range(1, 4096));
  return [a] { return RunPolicy(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(policy, "Print the bandwidth -> profile policy of a profile table",
                kvserve::cli::SetupPolicy);
