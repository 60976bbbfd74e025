// Copyright kvserve authors. `kvserve policy`: the piecewise-optimal policy
// (paper Theorem 6.2) of a profile table for one workload and quality floor,
// as bandwidth intervals in Gbps, with each profile's benefit threshold B*.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/policy_report.h"
#include "experiments/simulation_inputs.h"
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

int RunPolicy(const PolicyArgs& a) {
  auto fail = [](const Status& s) { return ReportError("policy", s); };
  Result<ProfileTable> table = ProfileTable::Load(a.table);
  if (!table.ok()) return fail(table.status());
  Result<int> w = table->WorkloadIndex(a.workload);
  if (!w.ok()) return fail(w.status());
  auto model = lab::ParseLatencyModel(a.model, a.layers);
  if (!model.ok()) return fail(model.status());
  const double kv_bytes = a.kv_mib > 0.0 ? a.kv_mib * 1048576.0 : kInfinity;
  Result<std::vector<PolicyInterval>> policy =
      PiecewisePolicy(*table, *model, *w, a.quality_min, kv_bytes);
  if (!policy.ok()) return fail(policy.status());
  fmt::print("{}", lab::PolicyReportText(*table, *w, a.workload, a.quality_min, *model, a.model,
                                         kv_bytes, *policy));
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
