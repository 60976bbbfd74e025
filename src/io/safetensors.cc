#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

struct DTypeEntry {
  SafetensorsDType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {SafetensorsDType::kBool, "BOOL", 1},   {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},       {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1}, {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},     {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},   {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},     {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF64, "F64", 8},     {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
};

const DTypeEntry& EntryOf(SafetensorsDType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];
}

// a * b, or false on uint64 overflow.
bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

size_t SafetensorsDTypeSize(SafetensorsDType dtype) { return EntryOf(dtype).size; }
std::string_view SafetensorsDTypeName(SafetensorsDType dtype) { return EntryOf(dtype).name; }

Result<SafetensorsDType> ParseSafetensorsDType(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return Status::InvalidArgument("unknown safetensors dtype '" + std::string(name) + "'");
}

Result<DType> ToKvDType(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32: return DType::kF32;
    case SafetensorsDType::kF16: return DType::kF16;
    case SafetensorsDType::kBF16: return DType::kBF16;
    default:
      return Status::NotSupported("dtype " + std::string(SafetensorsDTypeName(dtype)) +
                                  " is not a floating-point KV/weight dtype (F32, F16, BF16)");
  }
}

SafetensorsDType FromKvDType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return SafetensorsDType::kF32;
    case DType::kF16: return SafetensorsDType::kF16;
    case DType::kBF16: return SafetensorsDType::kBF16;
  }
  return SafetensorsDType::kF32;
}

int64_t TensorSlice::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError(path + ": open: " + ErrnoText());
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = Status::IOError(path + ": fstat: " + ErrnoText());
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IOError(path + ": not a regular file");
  }
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return Status::Corruption(path + ": file is " + std::to_string(size) +
                              " bytes, shorter than the 8-byte header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Status::IOError(path + ": mmap: " + ErrnoText());
  file->mapping_ = map;
  file->mapping_size_ = size;
  KVSERVE_RETURN_IF_ERROR(
      file->Parse(std::span<const std::byte>(static_cast<const std::byte*>(map), size)));
  return file;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(
    std::span<const std::byte> bytes, std::string source) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = std::move(source);
  KVSERVE_RETURN_IF_ERROR(file->Parse(bytes));
  return file;
}

Status SafetensorsFile::Parse(std::span<const std::byte> bytes) {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(path_ + ": " + what);
  };
  if (bytes.size() < 8) {
    return corrupt("file is " + std::to_string(bytes.size()) +
                   " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return corrupt("header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_len > bytes.size() - 8) {
    return corrupt("header length " + std::to_string(header_len) + " runs past the end of the " +
                   std::to_string(bytes.size()) + "-byte file (truncated?)");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  std::string_view header_text(header_begin, header_len);

  // nlohmann keeps the last of duplicate keys silently; a header that names a
  // tensor twice is lying about something, so catch it during the parse.
  std::set<std::string> top_keys;
  bool duplicate = false;
  std::string duplicate_key;
  nlohmann::json::parser_callback_t on_event =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
          if (!top_keys.insert(parsed.get<std::string>()).second && !duplicate) {
            duplicate = true;
            duplicate_key = parsed.get<std::string>();
          }
        }
        return true;
      };
  nlohmann::json header = nlohmann::json::parse(header_text.begin(), header_text.end(), on_event,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded()) return corrupt("header is not valid JSON");
  if (!header.is_object()) return corrupt("header is not a JSON object");
  if (duplicate) return corrupt("header names '" + duplicate_key + "' twice");

  const uint64_t data_size = bytes.size() - 8 - header_len;
  const std::byte* data = bytes.data() + 8 + header_len;
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return corrupt("__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return corrupt("__metadata__ value for '" + m.key() + "' is not a string");
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return corrupt("tensor '" + name + "': " + what); };
    if (!entry.is_object()) return bad("entry is not an object");
    for (auto f = entry.begin(); f != entry.end(); ++f) {
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") {
        return bad("unknown field '" + f.key() + "'");
      }
    }
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return bad("missing or non-string dtype");
    if (shape_it == entry.end() || !shape_it->is_array()) return bad("missing or non-array shape");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return bad("data_offsets is not a [begin, end] pair");
    }
    auto dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
    if (!dtype.ok()) return bad("unknown dtype '" + dtype_it->get<std::string>() + "'");
    TensorSlice slice;
    slice.name = name;
    slice.dtype = *dtype;
    uint64_t elements = 1;
    for (const auto& dim : *shape_it) {
      if (!dim.is_number_unsigned()) return bad("shape entry is not a non-negative integer");
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(INT64_MAX) || MulOverflows(elements, d, &elements)) {
        return bad("shape element count overflows");
      }
      slice.shape.push_back(static_cast<int64_t>(d));
    }
    const auto& b = (*offsets_it)[0];
    const auto& e = (*offsets_it)[1];
    if (!b.is_number_unsigned() || !e.is_number_unsigned()) {
      return bad("data_offsets are not non-negative integers");
    }
    const uint64_t begin = b.get<uint64_t>();
    const uint64_t end = e.get<uint64_t>();
    if (begin > end) return bad("data_offsets begin " + std::to_string(begin) + " > end " +
                                std::to_string(end));
    if (end > data_size) {
      return bad("data_offsets end " + std::to_string(end) + " lies past the " +
                 std::to_string(data_size) + "-byte data buffer (truncated file or lying header)");
    }
    uint64_t expected = 0;
    if (MulOverflows(elements, SafetensorsDTypeSize(*dtype), &expected) ||
        expected != end - begin) {
      return bad("byte length " + std::to_string(end - begin) + " does not match dtype " +
                 dtype_it->get<std::string>() + " x shape (" +
                 std::to_string(elements) + " elements)");
    }
    slice.data = std::span<const std::byte>(data + begin, end - begin);
    ranges.push_back({begin, end, name});
    tensors_.emplace(name, std::move(slice));
  }
  // The format requires the tensors to tile the data buffer exactly.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const Range& r : ranges) {
    if (r.begin < cursor) {
      return corrupt("tensor '" + r.name + "': data_offsets [" + std::to_string(r.begin) + ", " +
                     std::to_string(r.end) + ") overlap the previous tensor");
    }
    if (r.begin > cursor) {
      return corrupt("tensor '" + r.name + "': hole of " + std::to_string(r.begin - cursor) +
                     " bytes before its data");
    }
    cursor = r.end;
  }
  if (cursor != data_size) {
    return corrupt(std::to_string(data_size - cursor) +
                   " trailing bytes after the last tensor are not indexed by the header");
  }
  return Status::Ok();
}

Result<TensorSlice> SafetensorsFile::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status::NotFound(path_ + ": no tensor named '" + std::string(name) + "'");
  }
  return it->second;
}

bool SafetensorsFile::Contains(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, slice] : tensors_) names.push_back(name);
  return names;
}

Result<std::vector<std::byte>> SerializeSafetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second) {
      return Status::InvalidArgument("safetensors: duplicate or reserved tensor name '" +
                                     t.name + "'");
    }
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || MulOverflows(elements, static_cast<uint64_t>(d), &elements)) {
        return Status::InvalidArgument("safetensors: tensor '" + t.name + "' has a bad shape");
      }
    }
    uint64_t bytes = 0;
    if (MulOverflows(elements, SafetensorsDTypeSize(t.dtype), &bytes) || bytes != t.data.size()) {
      return Status::InvalidArgument("safetensors: tensor '" + t.name + "' has " +
                                     std::to_string(t.data.size()) + " bytes, shape needs " +
                                     std::to_string(bytes));
    }
    nlohmann::ordered_json entry;
    entry["dtype"] = std::string(SafetensorsDTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    header[t.name] = std::move(entry);
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::vector<std::byte> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::byte* cursor = out.data() + 8 + text.size();
  for (const TensorToWrite& t : tensors) {
    if (!t.data.empty()) std::memcpy(cursor, t.data.data(), t.data.size());
    cursor += t.data.size();
  }
  return out;
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  KVSERVE_ASSIGN_OR_RETURN(std::vector<std::byte> image, SerializeSafetensors(tensors, metadata));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IOError(tmp + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::IOError(tmp + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::IOError(path + ": rename: " + ErrnoText());
    std::remove(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

}  // namespace kvserve
