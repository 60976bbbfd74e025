// Copyright kvserve authors. Helpers of the serve commands.
#include "serve_cli.h"

#include <filesystem>

#include "experiments/model_directory.h"

namespace kvserve::cli {

Result<std::string> ServeModelDirectory(std::string_view command, const std::string& flag) {
  const std::string fallback =
      (std::filesystem::temp_directory_path() / "kvserve-fallback-model-v1").string();
  std::string note;
  // The shipped models are under the data directory; without one, the
  // fallback model.
  auto data = DataDirectory();
  const std::string models = data.ok() ? lab::DataPath(*data, "models") : std::string("models");
  KVSERVE_ASSIGN_OR_RETURN(std::string dir,
                           lab::ResolveModelDirectory(flag, models, fallback, &note));
  Progress(command, "{}", note);
  return dir;
}

Result<int> ServeModelVocab(std::string_view command, const std::string& flag) {
  KVSERVE_ASSIGN_OR_RETURN(std::string dir, ServeModelDirectory(command, flag));
  KVSERVE_ASSIGN_OR_RETURN(ModelConfig config, lab::LoadModelConfig(dir));
  return config.vocab_size;
}

void AddRouterFlags(CLI::App* sub, RouterFlags* f) {
  sub->add_option("--prefill", f->prefill, "prefill worker addresses HOST:PORT[,...]")->required();
  sub->add_option("--secret-file", f->secret_file, "shared secret (else $KVSERVE_SECRET)");
  sub->add_option("--pool-chunk-tokens", f->pool_chunk_tokens,
                  "the prefill workers' pool chunk (prefix affinity key)")
      ->check(CLI::Range(1, 1 << 20));
  AddTransportFlags(sub, &f->transport);
}

Result<RouterOptions> ServeRouterOptions(std::string_view command, const RouterFlags& f,
                                         const std::string& local_id) {
  RouterOptions o;
  o.prefill_addresses = SplitList(f.prefill);
  if (o.prefill_addresses.empty()) return Status::InvalidArgument("--prefill HOST:PORT[,...] is required");
  KVSERVE_ASSIGN_OR_RETURN(o.connection.secret, LoadServeSecret(command, f.secret_file));
  o.connection.local_id = local_id;
  o.pool_chunk_tokens = f.pool_chunk_tokens;
  return o;
}

}  // namespace kvserve::cli
