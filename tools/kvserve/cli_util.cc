// Copyright kvserve authors.
#include "cli_util.h"

namespace kvserve::cli {

int ReportError(std::string_view command, const Status& status) {
  fmt::print(stderr, "kvserve {}: error: {}\n", command, status.ToString());
  return 1;
}

lab::Progress ProgressTo(std::string_view command) {
  return [command = std::string(command)](const std::string& line) {
    Progress(command, "{}", line);
  };
}

std::string& DataDirFlag() {
  static std::string flag;
  return flag;
}

Result<std::string> DataDirectory() { return lab::FindDataDirectory(DataDirFlag()); }

Result<std::string> DefaultDataFile(const std::string& path, bool user_set) {
  if (user_set) return path;
  KVSERVE_ASSIGN_OR_RETURN(std::string dir, DataDirectory());
  return lab::DataPath(dir, path);
}

}  // namespace kvserve::cli
