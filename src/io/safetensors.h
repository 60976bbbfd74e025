// Copyright kvserve authors. Reader and writer for the safetensors format.
//
// File layout (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of UTF-8 JSON header | data buffer
// The header maps tensor name -> {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]} (offsets relative to the data buffer) plus an
// optional "__metadata__" object of string -> string.
//
// The reader maps the file and validates every header field before any
// tensor is handed out: header length within the file and below
// kMaxSafetensorsHeaderBytes, JSON object of the shape above, known dtype,
// non-negative shape, begin <= end <= data size, element size * product(shape)
// == end - begin (overflow-checked), and the tensors tile the data buffer with
// no overlap and no hole (as the format requires). A malformed file yields
// Corruption naming the path and the tensor; nothing asserts on file bytes.
//
// Thread safety: a SafetensorsFile is immutable after Open; concurrent reads
// are safe. Tensor spans stay valid for the life of the SafetensorsFile.
#ifndef KVSERVE_IO_SAFETENSORS_H_
#define KVSERVE_IO_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/status.h"

namespace kvserve {

// Upper bound on the JSON header (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Element types of the safetensors format. Only kF32/kF16/kBF16 map onto the
// KV dtype (ToKvDType); the others are parsed and validated so that a
// checkpoint holding e.g. an int64 buffer still opens.
enum class SafetensorsDType : uint8_t {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kF64, kI64, kU64,
};

// Bytes per element (1, 2, 4 or 8).
size_t SafetensorsDTypeSize(SafetensorsDType dtype);
// The format's spelling: "F32", "BF16", "I64", ...
std::string_view SafetensorsDTypeName(SafetensorsDType dtype);
// Parses the format's spelling (case-sensitive, as the format defines it).
// InvalidArgument for anything else.
Result<SafetensorsDType> ParseSafetensorsDType(std::string_view name);
// kF32/kF16/kBF16 -> the matching DType; NotSupported otherwise.
Result<DType> ToKvDType(SafetensorsDType dtype);
SafetensorsDType FromKvDType(DType dtype);

// One tensor of an open file. `data` points into the mapping.
struct TensorSlice {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;

  int64_t NumElements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the file at `path`. NotFound if it does not exist,
  // IOError if it cannot be read or mapped, Corruption (message names `path`
  // and, where one is at fault, the tensor) if the contents are malformed.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  // Validates `bytes` (a whole file image) without copying it; the caller
  // keeps `bytes` alive for the life of the result. `source` names the bytes
  // in error messages. Same errors as Open.
  static Result<std::unique_ptr<SafetensorsFile>> FromBuffer(
      std::span<const std::byte> bytes, std::string source);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // The tensor called `name`, or NotFound naming the file and the tensor.
  Result<TensorSlice> Find(std::string_view name) const;
  // True when a tensor called `name` exists.
  bool Contains(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The path (or source name) the file was opened from.
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  Status Parse(std::span<const std::byte> bytes);

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::map<std::string, TensorSlice, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write. `data` must hold exactly element size * product(shape)
// bytes in little-endian element order.
struct TensorToWrite {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

// Serialises `tensors` (names unique, not "__metadata__", sizes consistent)
// and `metadata` into a safetensors image. Tensors are laid out in the order
// given; the header is space-padded so the data buffer starts 8-byte aligned.
// InvalidArgument on a duplicate name or a size mismatch.
Result<std::vector<std::byte>> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// SerializeSafetensors, then writes the image to `path` (via a temporary file
// renamed into place, so readers never see a partial file). IOError on
// failure, InvalidArgument as SerializeSafetensors.
Status WriteSafetensors(const std::string& path,
                        const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace kvserve

#endif  // KVSERVE_IO_SAFETENSORS_H_
