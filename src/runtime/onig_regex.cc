// Copyright kvserve authors. Oniguruma wrapper.
#include "runtime/onig_regex.h"

#include <oniguruma.h>

#include <mutex>

#include "runtime/unicode_text.h"

namespace kvserve::runtime {
namespace {

std::string OnigMessage(int code, OnigErrorInfo* info) {
  UChar buffer[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n = info ? onig_error_code_to_str(buffer, code, info)
                     : onig_error_code_to_str(buffer, code);
  return std::string(reinterpret_cast<const char*>(buffer), n > 0 ? n : 0);
}

void InitializeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

}  // namespace

struct OnigRegex::Impl {
  regex_t* regex = nullptr;
  ~Impl() {
    if (regex) onig_free(regex);
  }
};

OnigRegex::OnigRegex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OnigRegex::OnigRegex(OnigRegex&&) noexcept = default;
OnigRegex& OnigRegex::operator=(OnigRegex&&) noexcept = default;
OnigRegex::~OnigRegex() = default;

Result<OnigRegex> OnigRegex::Compile(std::string_view pattern) {
  InitializeOnce();
  if (!IsValidUtf8(pattern)) return Status::InvalidArgument("regex pattern is not valid UTF-8");
  auto impl = std::make_unique<Impl>();
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const UChar*>(pattern.data());
  const int r = onig_new(&impl->regex, p, p + pattern.size(), ONIG_OPTION_NONE,
                         ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    impl->regex = nullptr;
    return Status::InvalidArgument("regex " + std::string(pattern) + ": " + OnigMessage(r, &info));
  }
  return OnigRegex(std::move(impl));
}

Status OnigRegex::FindAll(std::string_view text,
                          std::vector<std::pair<size_t, size_t>>* matches) const {
  const auto* begin = reinterpret_cast<const UChar*>(text.data());
  const UChar* end = begin + text.size();
  OnigRegion* region = onig_region_new();
  if (region == nullptr) return Status::ResourceExhausted("onig_region_new");
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  Status status;
  while (from <= text.size()) {
    onig_region_clear(region);
    const int r = onig_search(impl_->regex, begin, end, begin + from, end, region, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) {
      status = Status::Internal("regex search: " + OnigMessage(r, nullptr));
      break;
    }
    const auto s = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    if (s != e) {
      matches->emplace_back(s, e);
      from = last_end = e;
      have_last = true;
      continue;
    }
    // An empty match: kept unless it directly follows the previous match;
    // either way the search resumes one character later.
    if (!(have_last && last_end == e)) {
      matches->emplace_back(s, e);
      last_end = e;
      have_last = true;
    }
    if (e >= text.size()) break;
    from = e;
    NextCodePoint(text, &from);
  }
  onig_region_free(region, 1);
  return status;
}

}  // namespace kvserve::runtime
