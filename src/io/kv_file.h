// Copyright kvserve authors. Internals of KV files (public API:
// include/kvserve/kv_file.h; format: docs/kv-files.md).
#ifndef KVSERVE_IO_KV_FILE_H_
#define KVSERVE_IO_KV_FILE_H_

#include <string>

#include "kvserve/kv_file.h"

namespace kvserve::io {

inline constexpr char kKvFileFormat[] = "kvserve-kv";
inline constexpr char kKvFileVersion[] = "1";

// "layers.{layer}.key" for kind 0, "layers.{layer}.value" for kind 1.
std::string KvTensorName(int layer, int kind);

}  // namespace kvserve::io

#endif  // KVSERVE_IO_KV_FILE_H_
