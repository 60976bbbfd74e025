// Copyright kvserve authors. SliceTokens (kvserve/engine.h): a token range
// of a cache view, for storing a prompt's prefix chunks in the pool.
#include <string>
#include <type_traits>
#include <variant>

#include "kvserve/engine.h"

namespace kvserve {

Result<DeviceKvSource> SliceTokens(const DeviceKvSource& source, int begin, int count) {
  return std::visit(
      [&](const auto& v) -> Result<DeviceKvSource> {
        if (begin < 0 || count <= 0 || begin + count > v.shape.tokens)
          return Status::InvalidArgument("tokens [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                                         ") outside a cache of " + std::to_string(v.shape.tokens));
        auto out = v;
        out.shape.tokens = count;
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, KvView>) {
          out.data = v.At(0, 0, 0, begin, 0);
        } else {
          if (begin % v.block_size != 0)
            return Status::InvalidArgument("a paged cache is sliced at block boundaries (block size " +
                                           std::to_string(v.block_size) + "), not at token " +
                                           std::to_string(begin));
          out.block_table = v.block_table + begin / v.block_size;
        }
        return DeviceKvSource(out);
      },
      source);
}

}  // namespace kvserve
