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

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// Decode table of one segment, indexed by slot: packed[slot] = (f[s] - 1)
// | (slot - cum[s]) << 16 (f[s] may be 2^15, so f - 1 fits 16 bits), and
// symbols[slot] = s. Two flat arrays so the AVX2 path can gather from them;
// `symbols` has 3 bytes of padding for its 4-byte gathers.
struct DecodeTable {
  std::vector<uint32_t> packed;
  std::vector<uint8_t> symbols;
};

#if defined(__x86_64__)
// For every 8-bit "lane needs a word" mask, the index of the word each lane
// takes from the next 8 words of the stream: lanes that need one take them
// in lane order (the scalar decoder's order).
struct WordExpandTable {
  alignas(32) int32_t index[256][8];
  WordExpandTable() {
    for (int m = 0; m < 256; ++m) {
      int next = 0;
      for (int j = 0; j < 8; ++j) index[m][j] = (m >> j) & 1 ? next++ : 0;
    }
  }
};

// Full steps of 32 symbols, eight lanes per vector, while at least 64 bytes
// of words remain (a step reads at most 32 words). Computes exactly what
// the scalar fast path computes, in uint32 arithmetic modulo 2^32; returns
// the symbols decoded (a multiple of 32) and advances *wp.
__attribute__((target("avx2"))) size_t DecodeStepsAvx2(uint32_t* state, const DecodeTable& table,
                                                       int table_bits, size_t count,
                                                       const uint8_t** wp, const uint8_t* wend,
                                                       uint8_t* out) {
  static const WordExpandTable expand;
  const int* packed = reinterpret_cast<const int*>(table.packed.data());
  const int* symbols = reinterpret_cast<const int*>(table.symbols.data());
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((uint32_t{1} << table_bits) - 1));
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i byte = _mm256_set1_epi32(0xFF);
  const __m128i shift = _mm_cvtsi32_si128(table_bits);
  __m256i x[4];
  for (int g = 0; g < 4; ++g) {
    x[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(state + 8 * g));
  }
  const uint8_t* p = *wp;
  size_t i = 0;
  while (i + kRansLanes <= count && wend - p >= 2 * kRansLanes) {
    for (int g = 0; g < 4; ++g) {
      const __m256i slot = _mm256_and_si256(x[g], mask);
      const __m256i e = _mm256_i32gather_epi32(packed, slot, 4);
      const __m256i sym = _mm256_and_si256(_mm256_i32gather_epi32(symbols, slot, 1), byte);
      const __m256i freq = _mm256_add_epi32(_mm256_and_si256(e, low16), one);
      __m256i y = _mm256_add_epi32(_mm256_mullo_epi32(freq, _mm256_srl_epi32(x[g], shift)),
                                   _mm256_srli_epi32(e, 16));
      const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), _mm256_setzero_si256());
      const int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
      const __m256i words =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const __m256i w = _mm256_permutevar8x32_epi32(
          words, _mm256_load_si256(reinterpret_cast<const __m256i*>(expand.index[m])));
      x[g] = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32(y, 16), w), need);
      p += 2 * __builtin_popcount(static_cast<unsigned>(m));
      // Symbols (< 256) to bytes: 32 -> 16 -> 8 bits within each 128-bit
      // half, then the two halves' low dwords.
      __m256i b = _mm256_packus_epi32(sym, sym);
      b = _mm256_packus_epi16(b, b);
      const uint32_t lo = static_cast<uint32_t>(_mm256_extract_epi32(b, 0));
      const uint32_t hi = static_cast<uint32_t>(_mm256_extract_epi32(b, 4));
      const uint64_t eight = uint64_t{lo} | (uint64_t{hi} << 32);
      std::memcpy(out + i + 8 * g, &eight, 8);
    }
    i += kRansLanes;
  }
  for (int g = 0; g < 4; ++g) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(state + 8 * g), x[g]);
  }
  *wp = p;
  return i;
}
#endif

// The encoder's per-symbol constants. The state update
//   x' = floor(x / f) * M + (x mod f) + cum = x + cum + q * (M - f),  q = floor(x / f)
// is computed without a division: q = high 64 bits of x * rcp (ryg_rans's
// reciprocal trick widened to 64 bits). For f >= 2, rcp = ceil(2^64 / f) and
// x < 2^32 gives x * rcp / 2^64 = x / f + e with 0 <= e < 2^-32 < 1/f, so
// the floor is exact. For f == 1, rcp = 2^64 - 1 yields q = x - 1 (x >= 1)
// and bias = cum + M - 1 absorbs the difference: x + cum + M - 1 + (x - 1) *
// (M - 1) = x * M + cum. Bit-identical to the division form (tested).
struct EncodeSymbol {
  uint64_t rcp = 0;
  uint32_t bias = 0;       // cum, or cum + M - 1 when f == 1
  uint32_t cmpl_freq = 0;  // M - f
  uint64_t renorm_limit = 0;  // states >= this emit a word first: f << (32 - n)
};

inline uint32_t RansEncodeStep(uint32_t x, const EncodeSymbol& e) {
  const uint64_t q = static_cast<uint64_t>((static_cast<unsigned __int128>(x) * e.rcp) >> 64);
  return static_cast<uint32_t>(x + e.bias + q * e.cmpl_freq);
}

Status DecodeRansPayload(ByteReader& reader, std::span<const uint8_t> in, uint16_t levels,
                         size_t count, uint8_t* out, bool use_avx2) {
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

  thread_local DecodeTable table;
  table.packed.resize(total);
  table.symbols.resize(total + 3);
  uint32_t cum = 0;
  for (int s = 0; s < levels; ++s) {
    const uint32_t f_minus_one = freqs[s] - 1;
    for (uint32_t k = 0; k < freqs[s]; ++k) table.packed[cum + k] = f_minus_one | (k << 16);
    std::memset(table.symbols.data() + cum, s, freqs[s]);
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
  const uint32_t* packed = table.packed.data();
  const uint8_t* symbols = table.symbols.data();
  auto step = [&](uint32_t x) {
    const uint32_t e = packed[x & mask];
    return ((e & 0xFFFF) + 1) * (x >> table_bits) + (e >> 16);
  };

  size_t i = 0;
#if defined(__x86_64__)
  if (use_avx2) i = DecodeStepsAvx2(state, table, table_bits, count, &wp, wend, out);
#endif
  // Fast path: a full step reads at most 32 words, so with >= 64 bytes left
  // no bounds check is needed inside the step.
  while (i + kRansLanes <= count && wend - wp >= 2 * kRansLanes) {
    for (int l = 0; l < kRansLanes; ++l) {
      uint32_t x = state[l];
      out[i + l] = symbols[x & mask];
      x = step(x);
      uint16_t w;
      std::memcpy(&w, wp, 2);
      // Branchless on purpose (see the encoder): need is 0 or 1.
      const uint32_t need = x < kRansStateLow ? 1u : 0u;
      x = (x << (need << 4)) | (w & (0u - need));
      wp += need << 1;
      state[l] = x;
    }
    i += kRansLanes;
  }
  // Checked path: the end of the stream and the ragged last step.
  for (; i < count; ++i) {
    const size_t l = i % kRansLanes;
    uint32_t x = state[l];
    out[i] = symbols[x & mask];
    x = step(x);
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

RansCodec::RansCodec(int table_bits, PackImpl impl)
    : table_bits_(std::clamp(table_bits, kRansMinTableBits, kRansMaxTableBits)), impl_(impl) {}

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

  const int n = table_bits_;
  const uint32_t table_size = uint32_t{1} << n;
  std::array<EncodeSymbol, 256> enc{};
  uint32_t cum = 0;
  for (int s = 0; s < levels; ++s) {
    const uint32_t f = freqs[s];
    EncodeSymbol& e = enc[s];
    e.cmpl_freq = table_size - f;
    e.renorm_limit = uint64_t{f} << (32 - n);
    if (f >= 2) {
      e.rcp = static_cast<uint64_t>(((static_cast<unsigned __int128>(1) << 64) + f - 1) / f);
      e.bias = cum;
    } else {
      e.rcp = ~uint64_t{0};
      e.bias = cum + table_size - 1;
    }
    cum += f;
  }

  // Encode backwards; words come out in reverse decode order. Symbol k is
  // coded by lane k % 32: the ragged last block first, then whole blocks of
  // 32 with the lane as a compile-time offset. Renormalisation is
  // branchless (a word slot is always written, and kept only when needed):
  // whether a state needs a word is data-dependent and mispredicts often.
  thread_local std::vector<uint16_t> words;
  words.resize(count + 1);  // at most one word per symbol, plus a scratch slot
  uint16_t* word_out = words.data();
  size_t num_words = 0;
  uint32_t state[kRansLanes];
  for (uint32_t& x : state) x = kRansStateLow;
  auto step = [&](size_t k, int lane) {
    const EncodeSymbol& e = enc[symbols[k]];
    uint32_t x = state[lane];
    // Arithmetic rather than `need ? x >> 16 : x`, which compilers turn
    // into a (mispredicted) branch.
    const uint32_t need = x >= e.renorm_limit ? 1u : 0u;
    word_out[num_words] = static_cast<uint16_t>(x);
    num_words += need;
    x >>= need << 4;
    state[lane] = RansEncodeStep(x, e);
  };
  const size_t whole = count - count % kRansLanes;
  for (size_t k = count; k-- > whole;) step(k, static_cast<int>(k % kRansLanes));
  for (size_t block = whole; block > 0; block -= kRansLanes) {
    for (int lane = kRansLanes - 1; lane >= 0; --lane) step(block - kRansLanes + lane, lane);
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
  const bool use_avx2 = impl_ == PackImpl::kAvx2 || (impl_ == PackImpl::kBest && CpuHasAvx2());
  return DecodeRansPayload(reader, in, levels, count, out, use_avx2);
}

}  // namespace kvserve::codecs
