// Copyright kvserve authors. The controller, its profile table and the
// bandwidth estimator. Units as in controller.h: bytes, seconds, bytes/s.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "kvserve/controller.h"
#include "kvserve/profile.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

// The clock of time.monotonic() (CLOCK_MONOTONIC on Linux).
double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double NowOr(py::handle now_seconds) {
  return now_seconds.is_none() ? MonotonicSeconds() : now_seconds.cast<double>();
}

LatencyModel ModelFrom(const std::string& kind, int layers) {
  LatencyModel model;
  if (kind == "serial") {
    model.kind = LatencyModelKind::kSerial;
  } else if (kind == "streamed") {
    model.kind = LatencyModelKind::kStreamed;
  } else {
    ThrowInvalid("model: '" + kind + "' is not 'serial' or 'streamed'");
  }
  if (layers < 1) ThrowInvalid("layers: must be >= 1");
  model.layers = layers;
  return model;
}

FallbackPolicy FallbackFrom(const std::string& name) {
  if (name == "raw") return FallbackPolicy::kRaw;
  if (name == "most_conservative") return FallbackPolicy::kMostConservative;
  if (name == "recompute") return FallbackPolicy::kRecompute;
  if (name == "fastest") return FallbackPolicy::kFastest;
  ThrowInvalid("fallback: '" + name + "' is not 'raw', 'most_conservative', 'recompute' or 'fastest'");
}

// A Decision plus the chosen row's spec, so Python callers need not keep the
// table at hand.
struct PyDecision {
  Decision decision;
  std::string spec;
};

class PyController {
 public:
  PyController(std::unique_ptr<Controller> controller, std::shared_ptr<BandwidthEstimator> estimator)
      : controller_(std::move(controller)), estimator_(std::move(estimator)) {}

  int WorkloadIndex(py::handle workload) const {
    if (py::isinstance<py::str>(workload))
      return ValueOrThrow(controller_->table().WorkloadIndex(workload.cast<std::string>()));
    return workload.cast<int>();
  }

  ControllerRequest Request(py::handle workload, double kv_bytes, py::handle bandwidth, py::handle peer,
                            double slo_seconds, double quality_min, double model_seconds,
                            py::handle now_seconds, double source_seconds = 0.0) const {
    ControllerRequest r;
    r.workload = WorkloadIndex(workload);
    r.kv_bytes = kv_bytes;
    if (!bandwidth.is_none() && !peer.is_none()) ThrowInvalid("pass bandwidth or peer, not both");
    if (!bandwidth.is_none()) {
      r.bandwidth = bandwidth.cast<double>();
    } else if (!peer.is_none()) {
      if (!estimator_) ThrowInvalid("peer given but the controller has no BandwidthEstimator");
      // With its spread: +inf for a peer never measured, which keeps the
      // decision raw instead of trusting the estimator's prior.
      const BandwidthEstimate q = estimator_->Query(peer.cast<std::string>());
      r.bandwidth = q.bytes_per_second;
      r.bandwidth_log_sigma = q.log_sigma;
    } else {
      ThrowInvalid("pass bandwidth (bytes/s) or peer (a name the BandwidthEstimator knows)");
    }
    r.slo_seconds = slo_seconds;
    r.quality_min = quality_min;
    r.model_seconds = model_seconds;
    r.now_seconds = NowOr(now_seconds);
    r.source_seconds = source_seconds;
    return r;
  }

  PyDecision Choose(const ControllerRequest& r) {
    Result<Decision> d = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      d = controller_->Decide(r);
    }
    PyDecision out{ValueOrThrow(std::move(d)), ""};
    out.spec = controller_->table().profile(out.decision.profile).spec;
    return out;
  }

  void Observe(const PyDecision& d, double observed_seconds, py::handle now_seconds) {
    ThrowIfError(controller_->Observe(d.decision, observed_seconds, NowOr(now_seconds)));
  }

  int ModelOptimum(const ControllerRequest& r) const { return ValueOrThrow(controller_->ModelOptimum(r)); }
  const ProfileTable& table() const { return controller_->table(); }
  std::shared_ptr<BandwidthEstimator> estimator() const { return estimator_; }

 private:
  std::unique_ptr<Controller> controller_;
  std::shared_ptr<BandwidthEstimator> estimator_;
};

}  // namespace

void RegisterController(py::module_& m) {
  m.attr("GBPS") = GbpsToBytesPerSecond(1.0);
  m.def("gbps_to_bytes_per_second", &GbpsToBytesPerSecond, py::arg("gbps"));
  m.def("bytes_per_second_to_gbps", &BytesPerSecondToGbps, py::arg("bytes_per_second"));

  py::class_<ProfileCost>(m, "ProfileCost", "One selectable profile as the offline profiler measured it.")
      .def(py::init([](std::string spec, double cr, double enc, double dec, double t0,
                       std::map<std::string, double, std::less<>> quality, bool streamed) {
             ProfileCost c;
             c.spec = std::move(spec);
             c.compression_ratio = cr;
             c.encode_bytes_per_second = enc;
             c.decode_bytes_per_second = dec;
             c.overhead_seconds = t0;
             c.quality = std::move(quality);
             c.streamed = streamed;
             return c;
           }),
           py::arg("spec"), py::arg("compression_ratio"), py::arg("encode_bytes_per_second") = kInfinity,
           py::arg("decode_bytes_per_second") = kInfinity, py::arg("overhead_seconds") = 0.0,
           py::arg("quality") = std::map<std::string, double, std::less<>>{}, py::kw_only(),
           py::arg("streamed") = true)
      .def_readwrite("spec", &ProfileCost::spec)
      .def_readwrite("compression_ratio", &ProfileCost::compression_ratio)
      .def_readwrite("encode_bytes_per_second", &ProfileCost::encode_bytes_per_second)
      .def_readwrite("decode_bytes_per_second", &ProfileCost::decode_bytes_per_second)
      .def_readwrite("overhead_seconds", &ProfileCost::overhead_seconds)
      .def_readwrite("quality", &ProfileCost::quality)
      .def_readwrite("streamed", &ProfileCost::streamed)
      .def("__repr__", [](const ProfileCost& c) {
        return "ProfileCost(spec='" + c.spec + "', compression_ratio=" + std::to_string(c.compression_ratio) + ")";
      });

  py::class_<ProfileTable>(m, "ProfileTable", "Profile rows; index 0 is always raw ('none').")
      .def_static("load", [](const std::string& path) { return ValueOrThrow(ProfileTable::Load(path)); },
                  py::arg("path"))
      .def_static("from_json", [](const std::string& json) { return ValueOrThrow(ProfileTable::FromJson(json)); },
                  py::arg("json"))
      .def_static("from_rows", [](std::vector<ProfileCost> rows, std::vector<std::string> workloads) {
        return ValueOrThrow(ProfileTable::FromRowsAndWorkloads(std::move(rows), std::move(workloads)));
      }, py::arg("rows"), py::arg("workloads") = std::vector<std::string>{})
      .def("to_json", &ProfileTable::ToJson)
      .def_property_readonly("profiles", &ProfileTable::profiles)
      .def_property_readonly("workloads", &ProfileTable::workloads)
      .def("__len__", &ProfileTable::size)
      .def("workload_index", [](const ProfileTable& t, const std::string& name) {
        return ValueOrThrow(t.WorkloadIndex(name));
      }, py::arg("name"))
      .def("quality", [](const ProfileTable& t, int index, py::handle workload) {
        const int w = py::isinstance<py::str>(workload) ? ValueOrThrow(t.WorkloadIndex(workload.cast<std::string>()))
                                                        : workload.cast<int>();
        if (index < 0 || index >= t.size()) ThrowInvalid("index out of range");
        if (w < 0 || w >= static_cast<int>(t.workloads().size())) ThrowInvalid("workload out of range");
        return t.Quality(index, w);
      }, py::arg("index"), py::arg("workload"))
      .def("index_of", [](const ProfileTable& t, const std::string& spec) {
        for (int i = 0; i < t.size(); ++i)
          if (t.profile(i).spec == spec) return i;
        throw StatusError{Status::NotFound("no profile '" + spec + "' in the table")};
      }, py::arg("spec"));

  py::class_<BandwidthEstimator, std::shared_ptr<BandwidthEstimator>>(
      m, "BandwidthEstimator", "Per-peer goodput EWMA (over seconds per byte). Thread-safe.")
      .def(py::init([](double prior, double alpha, double idle, double min_sample) {
             BandwidthEstimatorOptions o;
             o.prior_bytes_per_second = prior;
             o.alpha = alpha;
             o.idle_time_constant_seconds = idle;
             o.min_sample_seconds = min_sample;
             return std::make_shared<BandwidthEstimator>(o);
           }),
           py::arg("prior_bytes_per_second") = GbpsToBytesPerSecond(10.0), py::arg("alpha") = 0.3,
           py::arg("idle_time_constant_seconds") = 2.0, py::arg("min_sample_seconds") = 1e-4)
      .def("observe", [](BandwidthEstimator& e, const std::string& peer, double wire_bytes, double wire_seconds,
                         py::handle now_seconds) {
             ThrowIfError(e.Observe(peer, wire_bytes, wire_seconds, NowOr(now_seconds)));
           },
           py::arg("peer"), py::arg("wire_bytes"), py::arg("wire_seconds"), py::arg("now_seconds") = py::none())
      .def("estimate", &BandwidthEstimator::Estimate, py::arg("peer"))
      .def("sample_count", &BandwidthEstimator::SampleCount, py::arg("peer"));

  py::class_<PyDecision>(m, "Decision", "The controller's choice for one request.")
      .def_property_readonly("action", [](const PyDecision& d) {
        return d.decision.action == ControllerAction::kSend ? "send" : "recompute";
      })
      .def_property_readonly("profile_index", [](const PyDecision& d) { return d.decision.profile; })
      .def_readonly("spec", &PyDecision::spec)
      .def_property_readonly("profile", [](const PyDecision& d) { return ValueOrThrow(Profile::Parse(d.spec)); })
      .def_property_readonly("predicted_seconds", [](const PyDecision& d) { return d.decision.predicted_seconds; })
      .def_property_readonly("corrected_seconds", [](const PyDecision& d) { return d.decision.corrected_seconds; })
      .def_property_readonly("feasible", [](const PyDecision& d) { return d.decision.feasible; })
      .def_property_readonly("explored", [](const PyDecision& d) { return d.decision.explored; })
      .def("__repr__", [](const PyDecision& d) {
        return "Decision(action='" +
               std::string(d.decision.action == ControllerAction::kSend ? "send" : "recompute") + "', spec='" +
               d.spec + "', predicted_seconds=" + std::to_string(d.decision.predicted_seconds) +
               ", feasible=" + (d.decision.feasible ? "True" : "False") + ")";
      });

  py::class_<PyController>(m, "Controller", "Per-request profile choice under SLO and quality floor. Thread-safe.")
      .def(py::init([](ProfileTable table, std::shared_ptr<BandwidthEstimator> estimator, const std::string& model,
                       int layers, const std::string& fallback, bool bandit, double epsilon, int candidates,
                       uint64_t seed) {
             ControllerOptions o;
             o.model = ModelFrom(model, layers);
             o.fallback = FallbackFrom(fallback);
             o.bandit = bandit;
             o.epsilon = epsilon;
             o.candidates = candidates;
             o.seed = seed;
             return std::make_unique<PyController>(ValueOrThrow(Controller::Create(std::move(table), o)),
                                                   std::move(estimator));
           }),
           py::arg("table"), py::arg("estimator") = nullptr, py::arg("model") = "serial", py::arg("layers") = 32,
           py::arg("fallback") = "raw", py::arg("bandit") = true, py::arg("epsilon") = 0.05,
           py::arg("candidates") = 3, py::arg("seed") = 0x6b76736572766531ull)
      .def("choose", [](PyController& c, py::handle workload, double kv_bytes, py::handle bandwidth, py::handle peer,
                        double slo_seconds, double quality_min, double model_seconds, py::handle now_seconds,
                        double source_seconds, std::optional<std::vector<double>> frame_bytes) {
             ControllerRequest r = c.Request(workload, kv_bytes, bandwidth, peer, slo_seconds, quality_min,
                                             model_seconds, now_seconds, source_seconds);
             if (frame_bytes) r.frame_bytes = *frame_bytes;  // outlives Decide
             return c.Choose(r);
           },
           py::arg("workload"), py::kw_only(), py::arg("kv_bytes"), py::arg("bandwidth") = py::none(),
           py::arg("peer") = py::none(), py::arg("slo_seconds") = kInfinity, py::arg("quality_min") = 0.0,
           py::arg("model_seconds") = 0.0, py::arg("now_seconds") = py::none(), py::arg("source_seconds") = 0.0,
           py::arg("frame_bytes") = py::none())
      .def("observe", &PyController::Observe, py::arg("decision"), py::arg("observed_seconds"),
           py::arg("now_seconds") = py::none())
      .def("model_optimum", [](const PyController& c, py::handle workload, double kv_bytes, double bandwidth,
                               double quality_min) {
             return c.ModelOptimum(c.Request(workload, kv_bytes, py::float_(bandwidth), py::none(), kInfinity,
                                             quality_min, 0.0, py::float_(0.0)));
           },
           py::arg("workload"), py::kw_only(), py::arg("kv_bytes"), py::arg("bandwidth"), py::arg("quality_min") = 0.0)
      .def_property_readonly("table", &PyController::table, py::return_value_policy::reference_internal)
      .def_property_readonly("estimator", &PyController::estimator);

  m.def("predict_seconds", [](const ProfileCost& p, double kv_bytes, double bandwidth, const std::string& model,
                              int layers, double source_seconds) {
          return PredictSeconds(ModelFrom(model, layers), p, kv_bytes, bandwidth, source_seconds);
        },
        py::arg("cost"), py::arg("kv_bytes"), py::arg("bandwidth"), py::arg("model") = "serial", py::arg("layers") = 32,
        py::arg("source_seconds") = 0.0);
  m.def("benefit_threshold", &BenefitThreshold, py::arg("cost"));
  m.def("piecewise_policy", [](const ProfileTable& t, py::handle workload, double quality_min, double kv_bytes,
                               const std::string& model, int layers) {
          const int w = py::isinstance<py::str>(workload) ? ValueOrThrow(t.WorkloadIndex(workload.cast<std::string>()))
                                                          : workload.cast<int>();
          auto intervals = ValueOrThrow(PiecewisePolicy(t, ModelFrom(model, layers), w, quality_min, kv_bytes));
          py::list out;
          for (const auto& i : intervals)
            out.append(py::make_tuple(i.min_bandwidth, i.max_bandwidth, t.profile(i.profile).spec));
          return out;
        },
        py::arg("table"), py::arg("workload"), py::arg("quality_min") = 0.0, py::arg("kv_bytes") = kInfinity,
        py::arg("model") = "serial", py::arg("layers") = 32);
}

}  // namespace kvserve::python
