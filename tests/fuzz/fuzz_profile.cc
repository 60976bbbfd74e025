// libFuzzer target for profile specs and their JSON form (docs/profiles.md):
// the input is parsed as a spec and as JSON. Whatever parses round-trips:
// its canonical string parses back to the same canonical string, and its
// JSON parses back to the same profile.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvserve/profile.h"

namespace {

void CheckRoundTrip(const kvserve::Profile& p) {
  auto again = kvserve::Profile::Parse(p.ToString());
  if (!again.ok() || again->ToString() != p.ToString()) __builtin_trap();
  auto from_json = kvserve::Profile::FromJson(p.ToJson());
  if (!from_json.ok() || from_json->ToString() != p.ToString()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto p = kvserve::Profile::Parse(text); p.ok()) CheckRoundTrip(*p);
  if (auto p = kvserve::Profile::FromJson(text); p.ok()) CheckRoundTrip(*p);
  return 0;
}
