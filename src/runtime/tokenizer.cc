// Copyright kvserve authors. Tokenizer::Load: which tokenizer file a model
// directory's text goes through.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvserve/runtime.h"
#include "runtime/tokenizers.h"

namespace kvserve {
namespace {

Result<std::unique_ptr<Tokenizer>> LoadHfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return Status::IOError(path + ": read failed");
  return runtime::LoadHfTokenizerJson(text.str(), path);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHfJson(const std::string& json_text,
                                                         const std::string& name) {
  return runtime::LoadHfTokenizerJson(json_text, name);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path = dir;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return Status::NotFound(dir + ": no such tokenizer file or directory");
    if (path.extension() == ".json") return LoadHfFile(dir);
    return runtime::LoadSentencePieceTokenizer(dir);
  }
  const fs::path json = path / "tokenizer.json", sp = path / "tokenizer.model";
  const bool has_sp = fs::exists(sp, ec);
  if (fs::exists(json, ec)) {
    auto hf = LoadHfFile(json.string());
    // A SentencePiece-style tokenizer.json (Llama-2: Metaspace, byte
    // fallback) next to its tokenizer.model: the .model is the tokenizer.
    if (hf.ok() || hf.status().code() != StatusCode::kNotSupported || !has_sp) return hf;
  }
  if (has_sp) return runtime::LoadSentencePieceTokenizer(sp.string());
  return Status::NotFound(dir + ": no tokenizer.json or tokenizer.model");
}

}  // namespace kvserve
