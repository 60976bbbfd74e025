// Copyright kvserve authors. Static interleaved rANS.
//
// ---------------------------------------------------------------- format
// rans segment (normative; copied into docs/format.md §Codecs/rans).
// `levels` and `count` are known to the decoder from the enclosing record.
// b = BitsForLevels(levels). All multi-byte integers are little-endian.
//
//   offset  size      field
//   0       1         mode: 0 = rANS, 1 = packed fallback; other values invalid
//
// mode 1 (packed fallback): the rest of the segment is exactly the `pack`
// codec's bytes for the segment (ceil(count*b/8) bytes, zero padding bits).
// An encoder emits mode 1 when count == 0 or when the mode-0 form would not
// be smaller than 1 + ceil(count*b/8) bytes.
//
// mode 0 (rANS); count must be >= 1:
//   1       1         levels - 1 (must equal the decoder's levels - 1)
//   2       1         n = table_bits, 8 <= n <= 15; M = 2^n
//   3       var       frequency table: `levels` unsigned LEB128 varints
//                     f[0..levels) (7 bits per byte, low group first, high
//                     bit = continuation), each in minimal form and <= M,
//                     with sum f = M. cum[s] = f[0] + ... + f[s-1].
//   ..      4*K       initial decoder states x[0..K), K = min(count, 32),
//                     u32 each, every x[l] >= 2^16 (lane order 0..K-1)
//   ..      2*W       W renormalisation words, u16 each, in the order the
//                     decoder reads them; the segment ends after the last.
//
// Decoding symbol i = 0, 1, ..., count-1 uses lane l = i mod 32:
//   slot = x[l] mod M
//   s    = the symbol with cum[s] <= slot < cum[s] + f[s]     (f[s] >= 1)
//   x[l] = f[s] * floor(x[l] / M) + slot - cum[s]
//   if x[l] < 2^16: x[l] = x[l] * 2^16 + next word             (at most once)
//   output s
// After the last symbol, all W words must have been read and every x[l]
// must equal 2^16 (the encoder's initial state); anything else is corrupt.
// This is 32 states with 16-bit renormalisation (states in [2^16, 2^32)),
// all sharing one word stream: on a GPU one warp decodes 32 symbols per step
// and a ballot + prefix popcount of the "needs a word" flags gives each
// lane its word offset; on a CPU the 32 independent chains give enough
// instruction-level parallelism without SIMD.
//
// Frequencies come from NormalizeFrequencies (rans.h): integer-only and
// deterministic, so a segment's bytes depend only on its symbols, levels
// and n.
// ------------------------------------------------------------------------
#include "codecs/rans.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codecs/pack.h"

namespace kvserve::codecs {
namespace {

using pipeline::ByteReader;
using pipeline::ByteWriter;

constexpr uint8_t kModeRans = static_cast<uint8_t>(RansMode::kRans);
constexpr uint8_t kModePacked = static_cast<uint8_t>(RansMode::kPacked);

void PutVarint(uint32_t v, std::vector<uint8_t>* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<uint8_t>(v));
}

// Reads a minimal-form LEB128 value <= max_value (max_value < 2^21).
Status GetVarint(ByteReader& reader, uint32_t max_value, uint32_t* v) {
  uint32_t result = 0;
  for (int shift = 0; shift < 21; shift += 7) {
    uint8_t byte;
    KVSERVE_RETURN_IF_ERROR(reader.GetU8(&byte));
    result |= static_cast<uint32_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      if (byte == 0 && shift > 0) return Status::Corruption("rans: non-minimal varint");
      if (result > max_value) return Status::Corruption("rans: frequency too large");
      *v = result;
      return Status::Ok();
    }
  }
  return Status::Corruption("rans: varint too long");
}

struct DecodeEntry {
  uint16_t freq_minus_one;  // f[s] - 1 (f[s] may be 2^15)
  uint16_t bias;            // slot - cum[s]
  uint8_t symbol;
};

// The encoder's per-symbol constants.
struct EncodeSymbol {
  uint32_t freq = 0;
  uint32_t cum = 0;
  uint64_t renorm_limit = 0;  // states >= this emit a word first: f << (32 - n)
};

Status DecodeRansPayload(ByteReader& reader, std::span<const uint8_t> in, uint16_t levels,
                         size_t count, uint8_t* out) {
  if (count == 0) return Status::Corruption("rans: rANS mode with zero symbols");
  uint8_t levels_minus_one, table_bits;
  KVSERVE_RETURN_IF_ERROR(reader.GetU8(&levels_minus_one));
  KVSERVE_RETURN_IF_ERROR(reader.GetU8(&table_bits));
  if (levels_minus_one + 1 != levels) {
    return Status::Corruption("rans: segment has " + std::to_string(levels_minus_one + 1) +
                              " levels, expected " + std::to_string(levels));
  }
  if (table_bits < kRansMinTableBits || table_bits > kRansMaxTableBits) {
    return Status::Corruption("rans: table_bits " + std::to_string(table_bits) + " out of range");
  }
  const uint32_t total = uint32_t{1} << table_bits;
  std::array<uint32_t, 256> freqs{};
  uint32_t sum = 0;
  for (int s = 0; s < levels; ++s) {
    KVSERVE_RETURN_IF_ERROR(GetVarint(reader, total, &freqs[s]));
    sum += freqs[s];
    if (sum > total) return Status::Corruption("rans: frequencies exceed 2^table_bits");
  }
  if (sum != total) return Status::Corruption("rans: frequencies do not sum to 2^table_bits");

  thread_local std::vector<DecodeEntry> table;
  table.resize(total);
  uint32_t cum = 0;
  for (int s = 0; s < levels; ++s) {
    for (uint32_t k = 0; k < freqs[s]; ++k) {
      table[cum + k] = DecodeEntry{static_cast<uint16_t>(freqs[s] - 1), static_cast<uint16_t>(k),
                                   static_cast<uint8_t>(s)};
    }
    cum += freqs[s];
  }

  const size_t lanes = std::min<size_t>(count, kRansLanes);
  uint32_t state[kRansLanes];
  for (size_t l = 0; l < lanes; ++l) {
    KVSERVE_RETURN_IF_ERROR(reader.GetU32(&state[l]));
    if (state[l] < kRansStateLow) return Status::Corruption("rans: initial state below 2^16");
  }
  if (reader.remaining() % 2 != 0) return Status::Corruption("rans: odd word stream length");
  const uint8_t* wp = in.data() + reader.position();
  const uint8_t* const wend = in.data() + in.size();
  const uint32_t mask = total - 1;
  const DecodeEntry* tab = table.data();

  size_t i = 0;
  // Fast path: a full step reads at most 32 words, so with >= 64 bytes left
  // no bounds check is needed inside the step.
  while (i + kRansLanes <= count && wend - wp >= 2 * kRansLanes) {
    for (int l = 0; l < kRansLanes; ++l) {
      uint32_t x = state[l];
      const DecodeEntry e = tab[x & mask];
      out[i + l] = e.symbol;
      x = (uint32_t{e.freq_minus_one} + 1) * (x >> table_bits) + e.bias;
      uint16_t w;
      std::memcpy(&w, wp, 2);
      const bool need = x < kRansStateLow;
      x = need ? (x << 16) | w : x;
      wp += need ? 2 : 0;
      state[l] = x;
    }
    i += kRansLanes;
  }
  // Checked path: the end of the stream and the ragged last step.
  for (; i < count; ++i) {
    const size_t l = i % kRansLanes;
    uint32_t x = state[l];
    const DecodeEntry e = tab[x & mask];
    out[i] = e.symbol;
    x = (uint32_t{e.freq_minus_one} + 1) * (x >> table_bits) + e.bias;
    if (x < kRansStateLow) {
      if (wend - wp < 2) return Status::Corruption("rans: word stream overrun");
      uint16_t w;
      std::memcpy(&w, wp, 2);
      wp += 2;
      x = (x << 16) | w;
    }
    state[l] = x;
  }
  if (wp != wend) return Status::Corruption("rans: word stream not fully consumed");
  for (size_t l = 0; l < lanes; ++l) {
    if (state[l] != kRansStateLow) return Status::Corruption("rans: final state mismatch");
  }
  return Status::Ok();
}

}  // namespace

void NormalizeFrequencies(std::span<const uint64_t> counts, int table_bits,
                          std::span<uint32_t> freqs) {
  const uint64_t target = uint64_t{1} << table_bits;
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  uint64_t sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    uint64_t f = 0;
    if (counts[s] > 0) {
      // counts <= 2^40 and target <= 2^15: the product fits in 64 bits.
      f = std::max<uint64_t>(1, (counts[s] * target + total / 2) / total);
    }
    freqs[s] = static_cast<uint32_t>(f);
    sum += f;
  }
  auto largest = [&]() {
    size_t best = 0;
    for (size_t s = 1; s < counts.size(); ++s) {
      if (freqs[s] > freqs[best]) best = s;
    }
    return best;
  };
  if (sum < target) {
    freqs[largest()] += static_cast<uint32_t>(target - sum);
  }
  while (sum > target) {
    const size_t s = largest();
    const uint64_t take = std::min<uint64_t>(sum - target, freqs[s] - 1);
    freqs[s] -= static_cast<uint32_t>(take);
    sum -= take;
    if (take == 0) break;  // unreachable while levels <= 2^table_bits
  }
}

RansCodec::RansCodec(int table_bits)
    : table_bits_(std::clamp(table_bits, kRansMinTableBits, kRansMaxTableBits)) {}

Status RansCodec::Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateSegment(segment));
  const size_t count = segment.symbols.size();
  const uint16_t levels = segment.levels;
  const int bits = pipeline::BitsForLevels(levels);
  const size_t packed_size = PackedSize(count, bits);
  const size_t start = out->size();
  const uint8_t* symbols = segment.symbols.data();

  auto emit_packed = [&]() {
    out->resize(start + 1 + packed_size);
    (*out)[start] = kModePacked;
    PackSymbols(symbols, count, bits, out->data() + start + 1);
    return Status::Ok();
  };
  if (count == 0) return emit_packed();

  // Histogram with four sub-tables to break store-to-load dependencies.
  std::array<std::array<uint64_t, 256>, 4> hist{};
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    ++hist[0][symbols[i]];
    ++hist[1][symbols[i + 1]];
    ++hist[2][symbols[i + 2]];
    ++hist[3][symbols[i + 3]];
  }
  for (; i < count; ++i) ++hist[0][symbols[i]];
  std::array<uint64_t, 256> counts{};
  for (int s = 0; s < levels; ++s) counts[s] = hist[0][s] + hist[1][s] + hist[2][s] + hist[3][s];
  std::array<uint32_t, 256> freqs{};
  NormalizeFrequencies(std::span<const uint64_t>(counts.data(), levels), table_bits_,
                       std::span<uint32_t>(freqs.data(), levels));

  std::array<EncodeSymbol, 256> enc{};
  uint32_t cum = 0;
  for (int s = 0; s < levels; ++s) {
    enc[s].freq = freqs[s];
    enc[s].cum = cum;
    enc[s].renorm_limit = uint64_t{freqs[s]} << (32 - table_bits_);
    cum += freqs[s];
  }

  // Encode backwards; words come out in reverse decode order.
  thread_local std::vector<uint16_t> words;
  words.resize(count);  // at most one word per symbol
  size_t num_words = 0;
  uint32_t state[kRansLanes];
  for (uint32_t& x : state) x = kRansStateLow;
  const int n = table_bits_;
  for (size_t k = count; k-- > 0;) {
    const EncodeSymbol& e = enc[symbols[k]];
    uint32_t x = state[k % kRansLanes];
    if (x >= e.renorm_limit) {
      words[num_words++] = static_cast<uint16_t>(x);
      x >>= 16;
    }
    state[k % kRansLanes] = ((x / e.freq) << n) + (x % e.freq) + e.cum;
  }

  const size_t lanes = std::min<size_t>(count, kRansLanes);
  ByteWriter writer(out);
  writer.PutU8(kModeRans);
  writer.PutU8(static_cast<uint8_t>(levels - 1));
  writer.PutU8(static_cast<uint8_t>(n));
  for (int s = 0; s < levels; ++s) PutVarint(freqs[s], out);
  for (size_t l = 0; l < lanes; ++l) writer.PutU32(state[l]);
  const size_t rans_size = out->size() - start + 2 * num_words;
  if (rans_size >= 1 + packed_size) {
    out->resize(start);
    return emit_packed();
  }
  const size_t words_at = out->size();
  out->resize(words_at + 2 * num_words);
  uint8_t* dst = out->data() + words_at;
  for (size_t w = 0; w < num_words; ++w) {
    std::memcpy(dst + 2 * w, &words[num_words - 1 - w], 2);
  }
  return Status::Ok();
}

Status RansCodec::Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                         uint8_t* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateDecodeShape(levels, count));
  ByteReader reader(in);
  uint8_t mode;
  KVSERVE_RETURN_IF_ERROR(reader.GetU8(&mode));
  if (mode == kModePacked) {
    return UnpackSymbols(in.subspan(1), pipeline::BitsForLevels(levels), count, levels, out);
  }
  if (mode != kModeRans) return Status::Corruption("rans: unknown mode " + std::to_string(mode));
  return DecodeRansPayload(reader, in, levels, count, out);
}

}  // namespace kvserve::codecs
