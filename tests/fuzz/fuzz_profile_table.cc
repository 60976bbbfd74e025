// libFuzzer target for profile tables (docs/controller.md §Profile table
// format): whatever ProfileTable::FromJson accepts serialises with ToJson to
// a table it accepts again, of the same size, and a controller can be built
// on it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvserve/controller.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  auto table = ProfileTable::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!table.ok()) return 0;
  auto again = ProfileTable::FromJson(table->ToJson());
  if (!again.ok() || again->size() != table->size()) __builtin_trap();
  if (!Controller::Create(*table, {}).ok()) __builtin_trap();
  return 0;
}
