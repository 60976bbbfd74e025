// Copyright kvserve authors. Pre-tokenizer steps (see pre_tokenizer.h).
#include "runtime/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/json_fields.h"

namespace kvserve::runtime {
namespace {

// The crate's ByteLevel regex (GPT-2's), used when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

Result<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& config) {
  PreTokenizer p;
  if (!config.is_null()) KVSERVE_RETURN_IF_ERROR(AddStep(config, &p));
  return p;
}

Status PreTokenizer::AddStep(const nlohmann::json& config, PreTokenizer* out) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return Status::Corruption("tokenizer.json: pre_tokenizer without a type");
  }
  const std::string type = config["type"];
  if (type == "Sequence") {
    auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) {
      return Status::Corruption("tokenizer.json: pre_tokenizer Sequence without pretokenizers");
    }
    for (const auto& step : *it) KVSERVE_RETURN_IF_ERROR(AddStep(step, out));
    return Status::Ok();
  }
  Step step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = BoolField(config, "add_prefix_space", true);
    if (BoolField(config, "use_regex", true)) {
      KVSERVE_ASSIGN_OR_RETURN(auto regex, OnigRegex::Compile(kGpt2Pattern));
      step.regex = std::make_shared<const OnigRegex>(std::move(regex));
    }
    out->byte_level_ = true;
    out->steps_.push_back(std::move(step));
    return Status::Ok();
  }
  if (type != "Split") {
    return Status::NotSupported("tokenizer.json: pre_tokenizer type '" + type +
                                "' (implemented: Split, ByteLevel, Sequence)");
  }
  const nlohmann::json& pattern = config.value("pattern", nlohmann::json());
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    KVSERVE_ASSIGN_OR_RETURN(auto regex, OnigRegex::Compile(pattern["Regex"].get<std::string>()));
    step.regex = std::make_shared<const OnigRegex>(std::move(regex));
  } else if (pattern.contains("String") && pattern["String"].is_string()) {
    step.literal = pattern["String"].get<std::string>();
  } else {
    return Status::Corruption("tokenizer.json: Split pattern is neither {Regex} nor {String}");
  }
  const std::string behavior = StringField(config, "behavior", "Isolated");
  if (behavior == "Isolated") {
    step.behavior = Behavior::kIsolated;
  } else if (behavior == "Removed") {
    step.behavior = Behavior::kRemoved;
  } else if (behavior == "MergedWithPrevious") {
    step.behavior = Behavior::kMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    step.behavior = Behavior::kMergedWithNext;
  } else if (behavior == "Contiguous") {
    step.behavior = Behavior::kContiguous;
  } else {
    return Status::NotSupported("tokenizer.json: Split behavior '" + behavior + "'");
  }
  step.invert = BoolField(config, "invert", false);
  out->steps_.push_back(std::move(step));
  return Status::Ok();
}

Status PreTokenizer::SplitPiece(const Step& step, std::string_view piece,
                                std::vector<std::string_view>* out) const {
  // (offsets, is_match) covering the piece, as the crate's Pattern::find_matches.
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<Span> spans;  // reordered in place for MergedWithNext
  std::vector<std::pair<size_t, size_t>> found;
  if (step.regex) {
    KVSERVE_RETURN_IF_ERROR(step.regex->FindAll(piece, &found));
  } else if (!step.literal.empty()) {
    for (size_t at = piece.find(step.literal); at != std::string_view::npos;
         at = piece.find(step.literal, at + step.literal.size())) {
      found.emplace_back(at, at + step.literal.size());
    }
  }
  size_t prev = 0;
  for (auto [b, e] : found) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != piece.size()) spans.push_back({prev, piece.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.match = !s.match;
  }
  // (offsets, remove) after the behavior, as NormalizedString::split.
  std::vector<Span> kept;
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::kIsolated:
      kept = spans;
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.match) kept.push_back(s);
      }
      break;
    case Behavior::kContiguous:
    case Behavior::kMergedWithPrevious:
    case Behavior::kMergedWithNext: {
      // Contiguous joins a span to a previous one of the same kind; the
      // Merged behaviors join a match to the span before it (after it for
      // MergedWithNext, which the crate runs from the end).
      const bool backwards = step.behavior == Behavior::kMergedWithNext;
      if (backwards) std::reverse(spans.begin(), spans.end());
      for (const Span& s : spans) {
        const bool join = step.behavior == Behavior::kContiguous ? s.match == previous_match
                                                                 : s.match && !previous_match;
        if (join && !kept.empty()) {
          (backwards ? kept.back().begin : kept.back().end) = backwards ? s.begin : s.end;
        } else {
          kept.push_back(s);
        }
        previous_match = s.match;
      }
      if (backwards) std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Span& s : kept) {
    if (s.end > s.begin) out->push_back(piece.substr(s.begin, s.end - s.begin));
  }
  return Status::Ok();
}

Status PreTokenizer::Run(std::string_view text, Pieces* out) const {
  out->views.clear();
  out->views.push_back(text);
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : out->views) {
      if (step.byte_level) {
        if (step.add_prefix_space && piece.front() != ' ') {
          out->storage.push_back(" " + std::string(piece));
          piece = out->storage.back();
        }
        if (!step.regex) {
          next.push_back(piece);
          continue;
        }
      }
      KVSERVE_RETURN_IF_ERROR(SplitPiece(step, piece, &next));
    }
    out->views.swap(next);
  }
  return Status::Ok();
}

}  // namespace kvserve::runtime
