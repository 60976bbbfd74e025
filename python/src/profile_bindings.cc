// Copyright kvserve authors. Profile, its parameters, and the presets.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <string>

#include "bindings.h"
#include "errors.h"
#include "kvserve/profile.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

ParamInfo FindParam(const std::string& key) {
  for (const ParamInfo& info : AllParams())
    if (info.key == key) return info;
  std::string keys;
  for (const ParamInfo& info : AllParams()) keys += (keys.empty() ? "" : ", ") + std::string(info.key);
  throw StatusError{Status::NotFound("unknown profile parameter '" + key + "' (known: " + keys + ")")};
}

bool IsAxis(ParamId id) { return id == ParamId::kAxisKey || id == ParamId::kAxisValue; }

// Enumerated parameters are words in specs; accept the words from Python too.
int64_t ParamValue(const ParamInfo& info, py::handle value) {
  if (py::isinstance<py::str>(value)) {
    const std::string word = value.cast<std::string>();
    if (IsAxis(info.id) && word == "token") return static_cast<int64_t>(QuantAxis::kToken);
    if (IsAxis(info.id) && word == "channel") return static_cast<int64_t>(QuantAxis::kChannel);
    if (info.id == ParamId::kScaleDType && word == "f16") return static_cast<int64_t>(ScaleDType::kF16);
    if (info.id == ParamId::kScaleDType && word == "f32") return static_cast<int64_t>(ScaleDType::kF32);
    ThrowInvalid("parameter '" + std::string(info.key) + "': '" + word + "' is not a valid value");
  }
  if (PyBool_Check(value.ptr()) || !PyLong_Check(value.ptr()))
    ThrowInvalid("parameter '" + std::string(info.key) + "' takes an integer");
  return value.cast<int64_t>();
}

py::object ParamPython(ParamId id, int64_t value) {
  if (IsAxis(id)) return py::str(value == static_cast<int64_t>(QuantAxis::kToken) ? "token" : "channel");
  if (id == ParamId::kScaleDType) return py::str(value == static_cast<int64_t>(ScaleDType::kF16) ? "f16" : "f32");
  return py::int_(value);
}

const char* ScopeName(ParamScope scope) {
  switch (scope) {
    case ParamScope::kTransform: return "transform";
    case ParamScope::kQuantizer: return "quantizer";
    case ParamScope::kCodec: return "codec";
    case ParamScope::kPipeline: return "pipeline";
  }
  return "?";
}

}  // namespace

void RegisterProfile(py::module_& m) {
  py::class_<Profile>(m, "Profile", "A complete pipeline configuration (transform -> quantizer -> codec).")
      .def(py::init<>())
      .def(py::init([](const std::string& spec) { return ValueOrThrow(Profile::Parse(spec)); }),
           py::arg("spec"))
      .def_static("parse", [](const std::string& spec) { return ValueOrThrow(Profile::Parse(spec)); },
                  py::arg("spec"))
      .def_static("from_json", [](const std::string& json) { return ValueOrThrow(Profile::FromJson(json)); },
                  py::arg("json"))
      .def("to_json", &Profile::ToJson)
      .def("__str__", &Profile::ToString)
      .def("__repr__", [](const Profile& p) { return "Profile('" + p.ToString() + "')"; })
      .def("__eq__", [](const Profile& a, const Profile& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const Profile& p) { return std::hash<std::string>()(p.ToString()); })
      .def("validate", [](const Profile& p) { ThrowIfError(p.Validate()); })
      .def_property_readonly("transform", [](const Profile& p) { return std::string(TransformName(p.transform())); })
      .def_property_readonly("quantizer", [](const Profile& p) { return std::string(QuantizerName(p.quantizer())); })
      .def_property_readonly("codec", [](const Profile& p) { return std::string(CodecName(p.codec())); })
      .def_property_readonly("is_lossless", &Profile::IsLossless)
      .def("get", [](const Profile& p, const std::string& key) {
             const ParamInfo info = FindParam(key);
             return ParamPython(info.id, p.Get(info.id));
           }, py::arg("key"))
      .def("is_set", [](const Profile& p, const std::string& key) { return p.IsSet(FindParam(key).id); },
           py::arg("key"))
      .def("set", [](Profile& p, const std::string& key, py::handle value) {
             const ParamInfo info = FindParam(key);
             ThrowIfError(p.Set(info.id, ParamValue(info, value)));
           }, py::arg("key"), py::arg("value"))
      .def("clear", [](Profile& p, const std::string& key) { p.Clear(FindParam(key).id); }, py::arg("key"))
      .def("params", [](const Profile& p) {
             py::dict out;
             for (const ParamInfo& info : AllParams())
               if (ParamApplies(info.id, p.transform(), p.quantizer(), p.codec()))
                 out[py::str(std::string(info.key))] = ParamPython(info.id, p.Get(info.id));
             return out;
           })
      .def(py::pickle([](const Profile& p) { return p.ToString(); },
                      [](const std::string& spec) { return ValueOrThrow(Profile::Parse(spec)); }));

  py::class_<Preset>(m, "Preset", "A built-in named profile.")
      .def_property_readonly("name", [](const Preset& p) { return std::string(p.name); })
      .def_property_readonly("spec", [](const Preset& p) { return std::string(p.spec); })
      .def_property_readonly("description", [](const Preset& p) { return std::string(p.description); })
      .def_property_readonly("profile", [](const Preset& p) { return ValueOrThrow(Profile::Parse(p.spec)); })
      .def("__repr__", [](const Preset& p) {
        return "Preset(name='" + std::string(p.name) + "', spec='" + std::string(p.spec) + "')";
      });
  m.def("presets", [] {
    std::vector<Preset> out(Presets().begin(), Presets().end());
    return out;
  });

  py::class_<ParamInfo>(m, "ParamInfo", "One profile parameter: key, bounds, default.")
      .def_property_readonly("id", [](const ParamInfo& i) { return static_cast<int>(i.id); })
      .def_property_readonly("key", [](const ParamInfo& i) { return std::string(i.key); })
      .def_property_readonly("scope", [](const ParamInfo& i) { return std::string(ScopeName(i.scope)); })
      .def_readonly("min_value", &ParamInfo::min_value)
      .def_readonly("max_value", &ParamInfo::max_value)
      .def_readonly("default_value", &ParamInfo::default_value)
      .def_property_readonly("help", [](const ParamInfo& i) { return std::string(i.help); })
      .def("__repr__", [](const ParamInfo& i) {
        return "ParamInfo(key='" + std::string(i.key) + "', min=" + std::to_string(i.min_value) +
               ", max=" + std::to_string(i.max_value) + ", default=" + std::to_string(i.default_value) + ")";
      });
  m.def("param_info", [] {
    std::vector<ParamInfo> out(AllParams().begin(), AllParams().end());
    return out;
  });
}

}  // namespace kvserve::python
