// Copyright kvserve authors. The strategy space: a JSON description expanded
// into the list of valid, distinct profiles the searchers choose from.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvserve/profiler.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFormat = "kvserve-strategy-space";

struct ParamGrid {
  ParamId id;
  std::vector<int64_t> values;
};

const ParamInfo* FindByKey(std::string_view key) {
  for (const ParamInfo& p : AllParams()) {
    if (p.key == key) return &p;
  }
  return nullptr;
}

bool IsEnum(ParamId id) {
  return id == ParamId::kAxisKey || id == ParamId::kAxisValue || id == ParamId::kScaleDType;
}

Result<int64_t> EnumValue(ParamId id, const std::string& word) {
  if (id == ParamId::kScaleDType) {
    if (word == "f16") return int64_t{0};
    if (word == "f32") return int64_t{1};
  } else {
    if (word == "token") return int64_t{0};
    if (word == "channel") return int64_t{1};
  }
  return Status::InvalidArgument("bad word \"" + word + "\"");
}

// Expands one parameter's value description (list or range) and checks it
// against the parameter's bounds.
Result<std::vector<int64_t>> ExpandValues(const ParamInfo& info, const Json& spec,
                                          const std::string& where) {
  std::vector<int64_t> values;
  if (spec.is_array()) {
    for (const Json& v : spec) {
      if (v.is_string()) {
        if (!IsEnum(info.id)) {
          return Status::InvalidArgument(where + ": word value for a numeric parameter");
        }
        auto ev = EnumValue(info.id, v.get<std::string>());
        if (!ev.ok()) return ev.status().WithContext(where);
        values.push_back(*ev);
      } else if (v.is_number_integer()) {
        values.push_back(v.get<int64_t>());
      } else {
        return Status::InvalidArgument(where + ": values must be integers or words");
      }
    }
  } else if (spec.is_object()) {
    if (!spec.contains("min") || !spec.contains("max")) {
      return Status::InvalidArgument(where + ": a range needs \"min\" and \"max\"");
    }
    const int64_t lo = spec.at("min").get<int64_t>();
    const int64_t hi = spec.at("max").get<int64_t>();
    if (lo > hi) return Status::InvalidArgument(where + ": min > max");
    if (spec.value("pow2", false)) {
      if (lo <= 0) return Status::InvalidArgument(where + ": pow2 range needs min > 0");
      int64_t v = 1;
      while (v < lo) v *= 2;
      for (; v <= hi; v *= 2) values.push_back(v);
    } else {
      const int64_t step = spec.value("step", int64_t{1});
      if (step <= 0) return Status::InvalidArgument(where + ": step must be > 0");
      if ((hi - lo) / step > 4096) return Status::InvalidArgument(where + ": range too long");
      for (int64_t v = lo; v <= hi; v += step) values.push_back(v);
    }
  } else {
    return Status::InvalidArgument(where + ": expected a list or a {min, max} range");
  }
  if (values.empty()) return Status::InvalidArgument(where + ": no values");
  for (int64_t v : values) {
    if (v < info.min_value || v > info.max_value) {
      return Status::InvalidArgument(where + ": value " + std::to_string(v) + " outside [" +
                                     std::to_string(info.min_value) + ", " +
                                     std::to_string(info.max_value) + "]");
    }
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// A component's parameter grids. `applies` decides whether a key belongs to
// the component; the reserved keys "transforms"/"codecs" are skipped.
template <typename AppliesFn>
Result<std::vector<ParamGrid>> ParseGrids(const Json& obj, const std::string& component,
                                          AppliesFn applies) {
  std::vector<ParamGrid> grids;
  if (!obj.is_object()) return Status::InvalidArgument(component + ": expected an object");
  for (const auto& [key, spec] : obj.items()) {
    if (key == "transforms" || key == "codecs" || key == "comment") continue;
    const std::string where = component + "." + key;
    const ParamInfo* info = FindByKey(key);
    if (info == nullptr) return Status::InvalidArgument(where + ": unknown parameter");
    if (!applies(info->id)) {
      return Status::InvalidArgument(where + ": parameter does not apply to " + component);
    }
    auto values = ExpandValues(*info, spec, where);
    if (!values.ok()) return values.status();
    grids.push_back({info->id, std::move(*values)});
  }
  return grids;
}

// Calls `fn(assignment)` for every element of the product of `grids`.
void ForEachAssignment(const std::vector<ParamGrid>& grids,
                       const std::function<void(const std::vector<int64_t>&)>& fn) {
  std::vector<size_t> index(grids.size(), 0);
  std::vector<int64_t> values(grids.size());
  while (true) {
    for (size_t i = 0; i < grids.size(); ++i) values[i] = grids[i].values[index[i]];
    fn(values);
    size_t i = 0;
    for (; i < grids.size(); ++i) {
      if (++index[i] < grids[i].values.size()) break;
      index[i] = 0;
    }
    if (i == grids.size()) return;
  }
}

template <typename Enum, size_t N>
Result<Enum> ComponentByName(std::string_view name, std::string_view (*namer)(Enum)) {
  for (size_t i = 0; i < N; ++i) {
    if (namer(static_cast<Enum>(i)) == name) return static_cast<Enum>(i);
  }
  return Status::InvalidArgument("unknown component \"" + std::string(name) + "\"");
}

struct Component {
  int type = 0;
  std::string name;
  std::vector<ParamGrid> grids;
};

}  // namespace

Result<StrategySpace> StrategySpace::FromProfiles(std::vector<Profile> profiles) {
  StrategySpace space;
  for (Profile& p : profiles) {
    KVSERVE_RETURN_IF_ERROR(p.Validate().WithContext(p.ToString()));
    if (space.IndexOf(p) < 0) space.profiles_.push_back(std::move(p));
  }
  return space;
}

int StrategySpace::IndexOf(const Profile& profile) const {
  for (size_t i = 0; i < profiles_.size(); ++i) {
    if (profiles_[i] == profile) return static_cast<int>(i);
  }
  return -1;
}

Result<StrategySpace> StrategySpace::FromJson(std::string_view text) {
  try {
    const Json doc = Json::parse(text);
    if (!doc.is_object()) return Status::InvalidArgument("strategy space: not an object");
    if (doc.value("format", std::string(kFormat)) != kFormat) {
      return Status::InvalidArgument("strategy space: format is not " + std::string(kFormat));
    }
    if (doc.value("version", 1) != 1) {
      return Status::NotSupported("strategy space: only version 1 is supported");
    }
    std::vector<Component> transforms, codecs;
    for (const auto& [name, obj] : doc.at("transforms").items()) {
      auto t = ComponentByName<TransformType, 4>(name, &TransformName);
      if (!t.ok()) return t.status().WithContext("strategy space: transforms");
      auto grids = ParseGrids(obj, name, [&](ParamId id) {
        return GetParamInfo(id).ok() && GetParamInfo(id)->scope == ParamScope::kTransform &&
               ParamApplies(id, *t, QuantizerType::kUniform, CodecType::kPack);
      });
      if (!grids.ok()) return grids.status().WithContext("strategy space");
      transforms.push_back({static_cast<int>(*t), name, std::move(*grids)});
    }
    for (const auto& [name, obj] : doc.at("codecs").items()) {
      auto c = ComponentByName<CodecType, 4>(name, &CodecName);
      if (!c.ok()) return c.status().WithContext("strategy space: codecs");
      auto grids = ParseGrids(obj, name, [&](ParamId id) {
        return GetParamInfo(id).ok() && GetParamInfo(id)->scope == ParamScope::kCodec &&
               ParamApplies(id, TransformType::kIdentity, QuantizerType::kUniform, *c);
      });
      if (!grids.ok()) return grids.status().WithContext("strategy space");
      codecs.push_back({static_cast<int>(*c), name, std::move(*grids)});
    }
    std::vector<ParamGrid> pipeline;
    if (doc.contains("pipeline")) {
      auto grids = ParseGrids(doc.at("pipeline"), "pipeline", [](ParamId id) {
        return id == ParamId::kChunkTokens;
      });
      if (!grids.ok()) return grids.status().WithContext("strategy space");
      pipeline = std::move(*grids);
    }

    StrategySpace space;
    std::vector<Profile> out;
    // Candidates before validation, counted before any is built: a few
    // hundred bytes of JSON can describe a product of 4097^k assignments.
    uint64_t candidates = 0;
    for (const auto& item : doc.at("quantizers").items()) {
      // Named references, not a structured binding: lambdas below use them
      // (clang before 16 cannot capture bindings).
      const std::string& qname = item.key();
      const Json& qobj = item.value();
      auto q = ComponentByName<QuantizerType, 7>(qname, &QuantizerName);
      if (!q.ok()) return q.status().WithContext("strategy space: quantizers");
      auto qgrids = ParseGrids(qobj, qname, [&](ParamId id) {
        return GetParamInfo(id).ok() && GetParamInfo(id)->scope == ParamScope::kQuantizer &&
               ParamApplies(id, TransformType::kIdentity, *q, CodecType::kPack);
      });
      if (!qgrids.ok()) return qgrids.status().WithContext("strategy space");
      // Conditional restriction of the transforms / codecs this quantizer
      // combines with.
      auto allowed = [&](const char* field, const std::string& name) {
        if (!qobj.contains(field)) return true;
        const auto& list = qobj.at(field);
        return std::find(list.begin(), list.end(), name) != list.end();
      };
      for (const Component& t : transforms) {
        if (!allowed("transforms", t.name)) continue;
        for (const Component& c : codecs) {
          if (!allowed("codecs", c.name)) continue;
          std::vector<ParamGrid> grids = t.grids;
          grids.insert(grids.end(), qgrids->begin(), qgrids->end());
          grids.insert(grids.end(), c.grids.begin(), c.grids.end());
          grids.insert(grids.end(), pipeline.begin(), pipeline.end());
          uint64_t product = 1;
          for (const ParamGrid& g : grids)
            product = g.values.size() > kMaxStrategySpaceCandidates / product
                          ? kMaxStrategySpaceCandidates + 1
                          : product * g.values.size();
          candidates += product;
          if (candidates > kMaxStrategySpaceCandidates)
            return Status::InvalidArgument(
                "strategy space: more than " + std::to_string(kMaxStrategySpaceCandidates) +
                " candidate profiles (the product of the grids); narrow the lists or ranges");
          Status error;
          ForEachAssignment(grids, [&](const std::vector<int64_t>& values) {
            if (!error.ok()) return;
            Profile p;
            p.set_transform(static_cast<TransformType>(t.type));
            p.set_quantizer(*q);
            p.set_codec(static_cast<CodecType>(c.type));
            for (size_t i = 0; i < grids.size(); ++i) {
              if (Status s = p.Set(grids[i].id, values[i]); !s.ok()) {
                error = s.WithContext(t.name + "+" + qname + "+" + c.name);
                return;
              }
            }
            if (!p.Validate().ok()) {
              ++space.rejected_;
              return;
            }
            out.push_back(std::move(p));
          });
          KVSERVE_RETURN_IF_ERROR(error);
        }
      }
    }
    if (doc.contains("include")) {
      for (const Json& spec : doc.at("include")) {
        auto p = Profile::Parse(spec.get<std::string>());
        if (!p.ok()) return p.status().WithContext("strategy space: include");
        out.push_back(std::move(*p));
      }
    }
    // Drop duplicates (a preset may already be in the product), keeping the
    // first occurrence; canonical strings identify profiles exactly.
    std::vector<std::string> seen;
    seen.reserve(out.size());
    for (Profile& p : out) {
      std::string spec = p.ToString();
      seen.push_back(std::move(spec));
    }
    std::vector<size_t> order(out.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return seen[a] < seen[b]; });
    std::vector<bool> keep(out.size(), true);
    for (size_t i = 1; i < order.size(); ++i) {
      if (seen[order[i]] == seen[order[i - 1]]) keep[order[i]] = false;
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (keep[i]) space.profiles_.push_back(std::move(out[i]));
    }
    if (space.profiles_.empty()) return Status::InvalidArgument("strategy space: empty");
    return space;
  } catch (const Json::exception& e) {
    return Status::InvalidArgument(std::string("strategy space: ") + e.what());
  }
}

Result<StrategySpace> StrategySpace::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto space = FromJson(text.str());
  if (!space.ok()) return space.status().WithContext(path);
  return space;
}

}  // namespace kvserve
