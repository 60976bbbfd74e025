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

}  // namespace kvserve::cli
