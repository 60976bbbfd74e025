// Copyright kvserve authors. The llama.cpp-shaped KV state API: one
// serializer (KvStateWrite) writes through a ByteSink; KvStateSize runs it
// into a CountingSink, so size and data cannot drift apart.
//
// Layout (little-endian):
//   "KVST" | u32 version = 1 | i32 layers, kv_heads, head_dim, tokens,
//   logit_count | u8 has_keep_mask, 3 zero bytes | i32 token_ids[tokens] |
//   f32 last_logits[logit_count] |
//   u8 keep[layers][kv_heads][tokens] (only with has_keep_mask) |
//   f32 kv[layers][2][kv_heads][tokens][head_dim] | u64 XXH3-64 of all above

#include <bit>
#include <cstring>
#include <fstream>
#include <memory>

#include "core/checksum.h"
#include "kvserve/runtime.h"

namespace kvserve {
namespace {

static_assert(std::endian::native == std::endian::little, "state format is little-endian");

constexpr char kMagic[4] = {'K', 'V', 'S', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kFixedHeader = 4 + 4 + 20 + 4;

class HashingWriter {
 public:
  explicit HashingWriter(ByteSink* sink) : sink_(sink) {}
  Status Write(const void* data, size_t size) {
    hash_.Update(data, size);
    return sink_->Append(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size));
  }
  Status Finish() {
    const uint64_t digest = hash_.Digest();
    return sink_->Append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&digest), 8));
  }

 private:
  ByteSink* sink_;
  Checksum64Stream hash_;
};

class SpanSink final : public ByteSink {
 public:
  explicit SpanSink(std::span<std::byte> dst) : dst_(dst) {}
  Status Append(std::span<const uint8_t> bytes) override {
    if (bytes.size() > dst_.size() - used_) {
      return Status::ResourceExhausted("KvStateGet: destination buffer too small");
    }
    if (bytes.empty()) return Status::Ok();  // data() may be null: memcpy forbids that
    std::memcpy(dst_.data() + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
    return Status::Ok();
  }
  size_t used() const { return used_; }

 private:
  std::span<std::byte> dst_;
  size_t used_ = 0;
};

}  // namespace

Status KvStateWrite(const KvState& kv, ByteSink* sink) {
  HashingWriter w(sink);
  const int32_t dims[5] = {kv.layers(), kv.kv_heads(), kv.head_dim(), kv.tokens(),
                           static_cast<int32_t>(kv.last_logits().size())};
  const uint8_t flags[4] = {static_cast<uint8_t>(kv.has_keep_mask() ? 1 : 0), 0, 0, 0};
  KVSERVE_RETURN_IF_ERROR(w.Write(kMagic, 4));
  KVSERVE_RETURN_IF_ERROR(w.Write(&kVersion, 4));
  KVSERVE_RETURN_IF_ERROR(w.Write(dims, sizeof(dims)));
  KVSERVE_RETURN_IF_ERROR(w.Write(flags, 4));
  KVSERVE_RETURN_IF_ERROR(w.Write(kv.token_ids().data(), kv.token_ids().size() * 4));
  KVSERVE_RETURN_IF_ERROR(w.Write(kv.last_logits().data(), kv.last_logits().size() * 4));
  if (kv.has_keep_mask()) {
    for (int l = 0; l < kv.layers(); ++l) {
      for (int h = 0; h < kv.kv_heads(); ++h) {
        KVSERVE_RETURN_IF_ERROR(w.Write(kv.keep_mask(l, h), kv.tokens()));
      }
    }
  }
  const size_t row_bytes = static_cast<size_t>(kv.tokens()) * kv.head_dim() * sizeof(float);
  for (int l = 0; l < kv.layers(); ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < kv.kv_heads(); ++h) {
        KVSERVE_RETURN_IF_ERROR(w.Write(kv.head_data(l, kind, h), row_bytes));
      }
    }
  }
  return w.Finish();
}

size_t KvStateSize(const KvState& kv) {
  CountingSink counter;
  Status s = KvStateWrite(kv, &counter);
  (void)s;  // a CountingSink never fails
  return counter.count();
}

Result<size_t> KvStateGet(const KvState& kv, std::span<std::byte> dst) {
  SpanSink sink(dst);
  KVSERVE_RETURN_IF_ERROR(KvStateWrite(kv, &sink));
  return sink.used();
}

Result<KvState> KvStateSet(std::span<const std::byte> src) {
  auto corrupt = [](const std::string& what) { return Status::Corruption("KV state: " + what); };
  if (src.size() < kFixedHeader + 8) return corrupt("truncated header");
  if (std::memcmp(src.data(), kMagic, 4) != 0) return corrupt("bad magic");
  uint32_t version;
  int32_t dims[5];
  std::memcpy(&version, src.data() + 4, 4);
  std::memcpy(dims, src.data() + 8, 20);
  const uint8_t has_mask = static_cast<uint8_t>(src[28]);
  if (version != kVersion) return corrupt("unsupported version " + std::to_string(version));
  if (has_mask > 1 || src[29] != std::byte{0} || src[30] != std::byte{0} || src[31] != std::byte{0}) {
    return corrupt("bad flags");
  }
  for (int i = 0; i < 3; ++i) {
    if (dims[i] <= 0 || dims[i] > 65536) return corrupt("bad shape");
  }
  if (dims[3] < 0) return corrupt("bad token count");
  if (dims[4] < 0) return corrupt("bad logit count");
  const uint64_t layers = dims[0], heads = dims[1], head_dim = dims[2], tokens = dims[3];
  const uint64_t logit_count = dims[4];
  // All factors are < 2^31, so these products fit in 128 bits; check 64.
  unsigned __int128 expect = kFixedHeader + tokens * 4 + logit_count * 4 + 8;
  if (has_mask) expect += static_cast<unsigned __int128>(layers) * heads * tokens;
  expect += static_cast<unsigned __int128>(layers) * 2 * heads * tokens * head_dim * 4;
  if (expect != src.size()) {
    return corrupt("size " + std::to_string(src.size()) + " does not match the header");
  }
  uint64_t stored;
  std::memcpy(&stored, src.data() + src.size() - 8, 8);
  if (Checksum64(src.data(), src.size() - 8) != stored) return corrupt("checksum mismatch");

  const std::byte* p = src.data() + kFixedHeader;
  std::vector<int32_t> ids(tokens);
  if (tokens) std::memcpy(ids.data(), p, tokens * 4);
  p += tokens * 4;
  std::vector<float> logits(logit_count);
  if (logit_count) std::memcpy(logits.data(), p, logit_count * 4);
  p += logit_count * 4;
  KvState kv(dims[0], dims[1], dims[2]);
  kv.AppendTokens(ids);
  kv.set_last_logits(std::move(logits));
  if (has_mask) {
    for (int l = 0; l < dims[0]; ++l) {
      for (int h = 0; h < dims[1]; ++h) {
        KVSERVE_RETURN_IF_ERROR(kv.SetKeepMask(
            l, h, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p), tokens)));
        p += tokens;
      }
    }
  }
  const size_t row_bytes = tokens * head_dim * sizeof(float);
  for (int l = 0; l < dims[0]; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < dims[1]; ++h) {
        if (row_bytes) std::memcpy(kv.head_data(l, kind, h), p, row_bytes);
        p += row_bytes;
      }
    }
  }
  return kv;
}

Status ExportKV(const KvState& kv, const std::string& path) {
  std::vector<std::byte> buffer(KvStateSize(kv));
  KVSERVE_ASSIGN_OR_RETURN(size_t written, KvStateGet(kv, buffer));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IOError(tmp + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(written));
    if (!out.flush()) return Status::IOError(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::IOError(path + ": rename failed");
  return Status::Ok();
}

Result<KvState> ImportKV(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound(path + ": cannot open");
  const std::streamsize size = in.tellg();
  if (size < 0) return Status::IOError(path + ": cannot size");
  std::vector<std::byte> buffer(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(buffer.data()), size)) {
    return Status::IOError(path + ": read failed");
  }
  auto kv = KvStateSet(buffer);
  if (!kv.ok()) return kv.status().WithContext(path);
  return kv;
}

}  // namespace kvserve
