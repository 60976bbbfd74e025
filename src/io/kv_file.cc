// Copyright kvserve authors. KV files: safetensors with one tensor per
// (layer, K/V). See docs/kv-files.md.
#include "io/kv_file.h"

#include <charconv>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kvserve/kv_file.h"

namespace kvserve {
namespace io {

std::string KvTensorName(int layer, int kind) {
  return "layers." + std::to_string(layer) + (kind == 0 ? ".key" : ".value");
}

namespace {

// Parses "layers.{l}.key" / "layers.{l}.value"; false for anything else.
bool ParseTensorName(std::string_view name, int* layer, int* kind) {
  constexpr std::string_view kPrefix = "layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  const std::string_view digits = name.substr(0, dot);
  if (digits.size() > 1 && digits[0] == '0') return false;  // one spelling per layer
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *layer);
  if (ec != std::errc() || end != digits.data() + digits.size() || *layer < 0) return false;
  const std::string_view suffix = name.substr(dot + 1);
  if (suffix == "key") {
    *kind = 0;
  } else if (suffix == "value") {
    *kind = 1;
  } else {
    return false;
  }
  return true;
}

}  // namespace
}  // namespace io

Status SaveKvFile(const std::string& path, const KvView& kv, const KvFileMetadata& metadata) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate().WithContext("SaveKvFile"));
  KvFileMetadata meta = metadata;
  for (const char* reserved : {"format", "version"}) {
    if (meta.count(reserved))
      return Status::InvalidArgument(std::string("SaveKvFile: metadata key '") + reserved +
                                     "' is reserved");
  }
  meta["format"] = io::kKvFileFormat;
  meta["version"] = io::kKvFileVersion;
  if (!meta.count("synthetic")) meta["synthetic"] = "false";

  const KvShape& s = kv.shape;
  const size_t esize = DTypeSize(kv.dtype);
  const size_t slab_elems = static_cast<size_t>(s.kv_heads) * s.tokens * s.head_dim;
  // Each tensor is a [heads][tokens][dim] slab; when the view lays slabs out
  // densely the file is written straight from the caller's memory.
  const bool dense_slabs = kv.strides.dim == 1 && kv.strides.token == s.head_dim &&
                           kv.strides.head == int64_t{s.tokens} * s.head_dim;
  std::vector<std::vector<std::byte>> gathered;
  std::vector<TensorToWrite> tensors;
  tensors.reserve(static_cast<size_t>(s.layers) * 2);
  for (int layer = 0; layer < s.layers; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      TensorToWrite t;
      t.name = io::KvTensorName(layer, kind);
      t.dtype = FromKvDType(kv.dtype);
      t.shape = {s.kv_heads, s.tokens, s.head_dim};
      if (dense_slabs) {
        t.data = std::span<const std::byte>(kv.At(layer, kind, 0, 0, 0), slab_elems * esize);
      } else {
        auto& buf = gathered.emplace_back(slab_elems * esize);
        std::byte* dst = buf.data();
        for (int h = 0; h < s.kv_heads; ++h) {
          for (int tok = 0; tok < s.tokens; ++tok) {
            if (kv.strides.dim == 1) {
              std::memcpy(dst, kv.At(layer, kind, h, tok, 0), esize * s.head_dim);
              dst += esize * s.head_dim;
            } else {
              for (int d = 0; d < s.head_dim; ++d, dst += esize)
                std::memcpy(dst, kv.At(layer, kind, h, tok, d), esize);
            }
          }
        }
        t.data = buf;
      }
      tensors.push_back(std::move(t));
    }
  }
  return WriteSafetensors(path, tensors, meta).WithContext("writing KV file " + path);
}

namespace {

// The KV cache in an opened (validated) safetensors image named `path`.
Result<KvCache> KvFromSafetensors(const SafetensorsFile* file, const std::string& path,
                                  KvFileMetadata* metadata) {
  const auto& meta = file->metadata();
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption("KV file " + path + ": " + what);
  };
  auto format = meta.find("format");
  if (format == meta.end() || format->second != io::kKvFileFormat)
    return corrupt("not a kvserve KV file (metadata \"format\" must be \"kvserve-kv\")");
  auto version = meta.find("version");
  if (version == meta.end() || version->second != io::kKvFileVersion)
    return Status::NotSupported("KV file " + path + ": unsupported version '" +
                                (version == meta.end() ? std::string() : version->second) +
                                "' (this build reads version 1)");

  const std::vector<std::string> names = file->Names();
  if (names.empty()) return corrupt("holds no tensors");
  int max_layer = -1;
  for (const auto& name : names) {
    int layer = 0, kind = 0;
    if (!io::ParseTensorName(name, &layer, &kind))
      return corrupt("unexpected tensor '" + name + "' (expected layers.{l}.key/value)");
    max_layer = std::max(max_layer, layer);
  }
  // Names are unique, so exactly 2 per layer means every layer is complete.
  if (static_cast<int64_t>(max_layer + 1) * 2 != static_cast<int64_t>(names.size()))
    return corrupt("tensors must be layers.0.key/value ... layers." + std::to_string(max_layer) +
                   ".key/value with none missing");

  KVSERVE_ASSIGN_OR_RETURN(TensorSlice first, file->Find(io::KvTensorName(0, 0)));
  if (first.shape.size() != 3) return corrupt("tensor layers.0.key must be 3-D");
  for (int64_t dim : first.shape) {
    if (dim <= 0 || dim > INT32_MAX) return corrupt("tensor layers.0.key has an invalid shape");
  }
  auto dtype_or = ToKvDType(first.dtype);
  if (!dtype_or.ok())
    return corrupt("dtype " + std::string(SafetensorsDTypeName(first.dtype)) +
                   " is not F32, F16 or BF16");
  KvShape shape{max_layer + 1, static_cast<int32_t>(first.shape[0]),
                static_cast<int32_t>(first.shape[1]), static_cast<int32_t>(first.shape[2])};
  // Tensor sizes were validated against the file size, so this allocation
  // is bounded by the file length.
  KvCache cache(*dtype_or, shape);
  MutableKvView view = cache.mutable_view();
  for (int layer = 0; layer < shape.layers; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      const std::string name = io::KvTensorName(layer, kind);
      KVSERVE_ASSIGN_OR_RETURN(TensorSlice t, file->Find(name));
      if (t.dtype != first.dtype) return corrupt("tensor " + name + " has a different dtype");
      if (t.shape != first.shape) return corrupt("tensor " + name + " has a different shape");
      std::memcpy(view.At(layer, kind, 0, 0, 0), t.data.data(), t.data.size());
    }
  }
  if (metadata != nullptr) *metadata = meta;
  return cache;
}

}  // namespace

Result<KvCache> LoadKvFile(const std::string& path, KvFileMetadata* metadata) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  return KvFromSafetensors(file.get(), path, metadata);
}

Result<KvCache> ParseKvFile(std::span<const std::byte> bytes, const std::string& source,
                            KvFileMetadata* metadata) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                           SafetensorsFile::FromBuffer(bytes, source));
  return KvFromSafetensors(file.get(), source, metadata);
}

}  // namespace kvserve
