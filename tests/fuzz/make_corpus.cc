// Writes the seed corpora of the fuzz targets and the golden frames:
//   fuzz_make_corpus OUT_DIR
// OUT_DIR/frame/<preset>.kvsf  one frame per preset of a small seeded
//                              synthetic cache (also the golden frames that
//                              tests/golden_frames_test.cc re-encodes);
// OUT_DIR/frame/hostile-*.kvsf   valid headers declaring huge caches with
//                              no or few records behind them (docs/format.md
//                              §7; tests/decoder_memory_cli_test.sh);
// OUT_DIR/roundtrip/, OUT_DIR/rans/  seeded random inputs;
// OUT_DIR/<target>/ for connection, serve_protocol, pool_wire, safetensors,
//                   kv_file, profile, profile_table, strategy_space: valid
//                   messages / files of each format (the shipped configs
//                   for the JSON ones), the fuzzers' starting points.
// Deterministic: the same binary writes the same bytes.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "golden_cache.h"
#include "hostile_frame.h"
#include "io/safetensors.h"
#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/kv_file.h"
#include "kvserve/pool.h"
#include "kvserve/profile.h"
#include "kvserve/transport.h"
#include "pool/pool_wire.h"
#include "runtime/bpe_model.h"
#include "serve/serve_protocol.h"
#include "transport/wire.h"

namespace {

bool WriteFile(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

bool WriteText(const std::filesystem::path& p, const std::string& text) {
  return WriteFile(p, std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<uint8_t> ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A transport message (docs/transport.md §2): header and payload.
void AppendMessage(uint8_t type, const std::vector<uint8_t>& payload, std::vector<uint8_t>* out) {
  kvserve::transport::MessageHeader h;
  h.type = type;
  h.length = payload.size();
  h.payload_checksum = kvserve::Checksum32(payload.data(), payload.size());
  uint8_t header[kvserve::transport::kMessageHeaderBytes];
  kvserve::transport::EncodeMessageHeader(h, header);
  out->insert(out->end(), header, header + sizeof(header));
  out->insert(out->end(), payload.begin(), payload.end());
}

std::vector<uint8_t> U64(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

// Seeds of fuzz_connection: mode byte, then a message script.
void ConnectionSeeds(const std::filesystem::path& dir, const kvserve::KvCache& kv) {
  using namespace kvserve;
  std::vector<uint8_t> hello = {'K', 'V', 'S', 'A', 1};
  hello.insert(hello.end(), 32, 0x11);
  hello.push_back(6);
  for (char c : std::string("client")) hello.push_back(static_cast<uint8_t>(c));
  std::vector<uint8_t> s0 = {0};
  AppendMessage(transport::kMsgHello, hello, &s0);
  AppendMessage(transport::kMsgResponse, std::vector<uint8_t>(32, 0x22), &s0);
  WriteFile(dir / "server-handshake", s0);
  std::vector<uint8_t> bad_version = hello;
  bad_version[4] = 9;
  std::vector<uint8_t> s0b = {0};
  AppendMessage(transport::kMsgHello, bad_version, &s0b);
  WriteFile(dir / "server-bad-version", s0b);
  std::vector<uint8_t> challenge(32, 0x33);
  challenge.push_back(6);
  for (char c : std::string("server")) challenge.push_back(static_cast<uint8_t>(c));
  challenge.insert(challenge.end(), 32, 0x44);
  std::vector<uint8_t> s1 = {1};
  AppendMessage(transport::kMsgChallenge, challenge, &s1);
  AppendMessage(transport::kMsgAuthOk, {}, &s1);
  WriteFile(dir / "client-handshake", s1);
  std::vector<uint8_t> s1e = {1};
  AppendMessage(transport::kMsgError, {static_cast<uint8_t>(StatusCode::kPermissionDenied), 'n', 'o'},
                &s1e);
  WriteFile(dir / "client-error", s1e);
  // Authenticated: a streamed frame (FRAME_BEGIN, the records, FRAME_END).
  for (const char* spec : {"none", "kivi-2"}) {
    auto enc = EncoderContext::Create(Profile::Parse(spec).value(), {.threads = 1});
    std::vector<uint8_t> frame;
    VectorSink sink(&frame);
    if (!enc.ok() || !(*enc)->Encode(kv.view(), sink).ok()) continue;
    auto info = InspectFrame(frame);
    if (!info.ok()) continue;
    std::vector<uint8_t> s2 = {2};
    std::vector<uint8_t> begin = U64(7);
    begin.insert(begin.end(), frame.begin(), frame.begin() + static_cast<long>(info->chunks[0].offset));
    AppendMessage(kMsgFrameBegin, begin, &s2);
    for (const ChunkEntry& c : info->chunks)
      AppendMessage(kMsgFrameRecord,
                    std::vector<uint8_t>(frame.begin() + static_cast<long>(c.offset),
                                         frame.begin() + static_cast<long>(c.offset + c.size)),
                    &s2);
    std::vector<uint8_t> end = U64(info->chunks.size());
    auto bytes = U64(frame.size());
    end.insert(end.end(), bytes.begin(), bytes.end());
    AppendMessage(kMsgFrameEnd, end, &s2);
    WriteFile(dir / (std::string("frame-") + spec), s2);
  }
  std::vector<uint8_t> s2h = {2};
  std::vector<uint8_t> begin = U64(9);
  auto hostile = testing::HostileHeader(KvShape{100, 1, 1 << 24, 1});
  begin.insert(begin.end(), hostile.begin(), hostile.end());
  AppendMessage(kMsgFrameBegin, begin, &s2h);
  WriteFile(dir / "frame-hostile-header", s2h);
}

void ServeProtocolSeeds(const std::filesystem::path& dir) {
  using namespace kvserve;
  ServeRequest r;
  r.id = 3;
  r.workload = "qa";
  r.prompt = {1, 2, 3, 4};
  r.quality_min = 0.97;
  r.use_pool = true;
  auto with_mode = [](uint8_t mode, std::vector<uint8_t> payload) {
    payload.insert(payload.begin(), mode);
    return payload;
  };
  WriteFile(dir / "request", with_mode(0, serve::EncodeRequest(r)));
  ServeResponse response;
  response.id = 3;
  response.tokens = {5, 6};
  response.timings.profile = "kivi-2";
  WriteFile(dir / "response", with_mode(1, serve::EncodeResponse(response)));
  response.status = Status::Unavailable("decode worker gone");
  WriteFile(dir / "response-error", with_mode(1, serve::EncodeResponse(response)));
  serve::GenerateMessage g;
  g.request_id = 3;
  g.transfer_ids = {10, 11};
  g.prompt = {1, 2, 3};
  g.suffix = {4};
  g.last_logits = {0.5f, -1.0f, 2.0f};
  WriteFile(dir / "generate", with_mode(2, serve::EncodeGenerate(g)));
  serve::ResultMessage m;
  m.request_id = 3;
  m.tokens = {7};
  WriteFile(dir / "result", with_mode(3, serve::EncodeResult(m)));
}

void PoolWireSeeds(const std::filesystem::path& dir) {
  using namespace kvserve;
  std::vector<uint8_t> key = {0};
  std::vector<uint8_t> encoded;
  pool::EncodeKey({"model:1", 0x1234, "kivi-2"}, &encoded);
  key.insert(key.end(), encoded.begin(), encoded.end());
  key.insert(key.end(), {1, 2, 3, 4});
  WriteFile(dir / "key-value", key);
  std::vector<uint8_t> prefix = {1};
  encoded.clear();
  pool::EncodePrefix("model:1", 0x1234, &encoded);
  prefix.insert(prefix.end(), encoded.begin(), encoded.end());
  WriteFile(dir / "prefix", prefix);
  std::vector<uint8_t> reply = {2};
  encoded.clear();
  pool::EncodeReplyHeader(Status::Ok(), &encoded);
  pool::EncodeLookup({{"kivi-2", 100}, {"none", 400}}, &encoded);
  reply.insert(reply.end(), encoded.begin(), encoded.end());
  WriteFile(dir / "reply-lookup", reply);
  std::vector<uint8_t> stats = {2};
  encoded.clear();
  pool::EncodeStats({3, 500, 1, 2, 0}, &encoded);
  stats.insert(stats.end(), encoded.begin(), encoded.end());
  WriteFile(dir / "stats", stats);
}

void FileFormatSeeds(const std::filesystem::path& root, const kvserve::KvCache& kv) {
  using namespace kvserve;
  std::vector<float> values = {1.0f, -2.0f, 3.5f, 0.25f};
  std::vector<TensorToWrite> tensors = {
      {"a", SafetensorsDType::kF32, {2, 2}, std::as_bytes(std::span<const float>(values))},
      {"empty", SafetensorsDType::kF16, {0, 3}, {}}};
  auto image = SerializeSafetensors(tensors, {{"k", "v"}});
  if (image.ok()) {
    std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(image->data()),
                               reinterpret_cast<const uint8_t*>(image->data()) + image->size());
    WriteFile(root / "safetensors" / "two-tensors", bytes);
  }
  const auto tmp = std::filesystem::temp_directory_path() / "kvserve-make-corpus.kvf";
  KvShape small{2, 1, 5, 8};
  KvCache part(DType::kF16, small);
  if (SaveKvFile(tmp.string(), part.view(), {{"synthetic", "true"}}).ok()) {
    WriteFile(root / "kv_file" / "small-f16", ReadFile(tmp));
    WriteFile(root / "safetensors" / "kv-file", ReadFile(tmp));
  }
  std::filesystem::remove(tmp);
  (void)kv;
}

void TextSeeds(const std::filesystem::path& root) {
  using namespace kvserve;
  int i = 0;
  for (const Preset& preset : Presets()) {
    auto p = Profile::Parse(preset.spec);
    if (!p.ok()) continue;
    WriteText(root / "profile" / ("spec-" + std::string(preset.name)), p->ToString());
    WriteText(root / "profile" / ("json-" + std::string(preset.name)), p->ToJson());
    ++i;
  }
  WriteText(root / "profile" / "name", "kvserve-h2r");
  WriteText(root / "profile" / "bad", "identity+kivi(k=9)+pack");
  const std::filesystem::path src(KVSERVE_SOURCE_DIR);
  WriteFile(root / "profile_table" / "example", ReadFile(src / "configs/profile_table.example.json"));
  WriteFile(root / "profile_table" / "measured",
            ReadFile(src / "configs/profiles/kvs-qwen2-9m-unified.json"));
  WriteText(root / "profile_table" / "small",
            R"({"profiles":[{"spec":"kivi-2","compression_ratio":5,"quality":{"chat":0.9}}]})");
  WriteFile(root / "strategy_space" / "default", ReadFile(src / "configs/strategy_space.json"));
  WriteText(root / "strategy_space" / "small",
            R"({"format":"kvserve-strategy-space","version":1,"transforms":{"identity":{}},)"
            R"("codecs":{"pack":{}},"quantizers":{"kivi":{"k":[2],"v":[2]}},"include":["none"]})");
}

// tokenizer.json (byte-level BPE as Llama-3 / Qwen ship it: split regex,
// ByteLevel, added tokens, NFC, a template) and generation_config.json.
void TokenizerSeeds(const std::filesystem::path& dir) {
  using nlohmann::json;
  auto utf8 = [](char32_t c) {
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
    return s;
  };
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[utf8(kvserve::runtime::ByteToChar()[b])] = b;
  vocab["ab"] = 256;
  vocab["\u0120the"] = 257;
  vocab["\u0120t"] = 258;
  vocab["\u0120th"] = 259;
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"},          {"vocab", vocab},
                {"merges", {"a b", "\u0120 t", "\u0120t h", "\u0120th e"}},
                {"ignore_merges", false}, {"dropout", nullptr},
                {"unk_token", nullptr},   {"byte_fallback", false}};
  WriteText(dir / "byte-level", j.dump());
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = json::array(
      {{{"id", 300}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
       {{"id", 301}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
       {{"id", 302}, {"content", "[L]"}, {"special", true}, {"normalized", false}, {"lstrip", true}},
       {{"id", 303}, {"content", "word"}, {"special", false}, {"single_word", true}}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {301}}, {"tokens", {"</s>"}}}}}}};
  WriteText(dir / "added-tokens-template", j.dump());
  WriteText(dir / "generation-config", R"({"bos_token_id": 1, "eos_token_id": [2, 7]})");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvserve;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root(argv[1]);
  for (const char* d : {"frame", "roundtrip", "rans", "connection", "serve_protocol", "pool_wire",
                        "safetensors", "kv_file", "profile", "profile_table", "strategy_space",
                        "tokenizer"})
    std::filesystem::create_directories(root / d);

  KvCache kv = testing::MakeGoldenCache();
  HeadScores scores = testing::GoldenHeadScores();
  std::mt19937 rng(20261130);
  for (const Preset& preset : Presets()) {
    auto profile = Profile::Parse(preset.spec);
    if (!profile.ok()) return 1;
    EncodeOptions options;
    options.threads = 1;
    options.head_scores = &scores;
    auto enc = EncoderContext::Create(*profile, options);
    if (!enc.ok()) return 1;
    std::vector<uint8_t> frame;
    VectorSink sink(&frame);
    if (!(*enc)->Encode(kv.view(), sink).ok()) return 1;
    if (!WriteFile(root / "frame" / (std::string(preset.name) + ".kvsf"), frame)) return 1;
  }
  {
    using testing::HostileHeader;
    const KvShape many{100, 1, 1 << 24, 1}, most{1024, 1, 1 << 24, 1}, wide{4, 4, 1 << 20, 16};
    if (!WriteFile(root / "frame" / "hostile-records.kvsf", HostileHeader(many))) return 1;
    if (!WriteFile(root / "frame" / "hostile-max.kvsf", HostileHeader(most))) return 1;
    std::vector<uint8_t> few = HostileHeader(wide);
    for (int t = 0; t < 48; t += 16) {
      auto r = testing::RawRecord(wide, DType::kF32, 0, 0, t, 16, 0x3c);
      few.insert(few.end(), r.begin(), r.end());
    }
    if (!WriteFile(root / "frame" / "hostile-few.kvsf", few)) return 1;
  }
  for (int i = 0; i < 24; ++i) {
    std::vector<uint8_t> bytes(6 + rng() % 3000);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (!WriteFile(root / "roundtrip" / ("seed" + std::to_string(i)), bytes)) return 1;
    std::vector<uint8_t> r(8 + rng() % 2000);
    for (size_t k = 0; k < r.size(); ++k) r[k] = static_cast<uint8_t>(k < 8 ? rng() : rng() % 5);
    if (!WriteFile(root / "rans" / ("seed" + std::to_string(i)), r)) return 1;
  }
  {
    KvCache small(DType::kF16, KvShape{2, 2, 40, 16});
    std::mt19937 fill(7);
    for (size_t b = 0; b < small.size_bytes(); b += 2) {
      const uint16_t h = FloatToHalf(std::normal_distribution<float>(0.f, 1.f)(fill));
      std::memcpy(small.bytes() + b, &h, 2);
    }
    ConnectionSeeds(root / "connection", small);
    ServeProtocolSeeds(root / "serve_protocol");
    PoolWireSeeds(root / "pool_wire");
    FileFormatSeeds(root, small);
    TextSeeds(root);
    TokenizerSeeds(root / "tokenizer");
  }
  std::printf("wrote corpora under %s\n", root.c_str());
  return 0;
}
