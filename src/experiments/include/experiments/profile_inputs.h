// Copyright kvserve authors. Profiles and head scores as the commands take
// them: a spec or preset name, comma-separated lists of them, and the head
// score file the mixhq / duo profiles need. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_PROFILE_INPUTS_H_
#define KVSERVE_EXPERIMENTS_PROFILE_INPUTS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

namespace kvserve::lab {

// Parses a spec string or preset name; the error names the bad input and
// points at `kvserve presets`.
Result<Profile> ResolveProfile(std::string_view spec);

// Splits each item on commas outside parentheses ("kivi-2,kivi(k=2,v=4)"
// -> "kivi-2", "kivi(k=2,v=4)") and trims spaces and tabs; empty pieces are
// dropped. The order of the pieces is the order they were given in.
std::vector<std::string> SplitProfileList(const std::vector<std::string>& items);

// The head scores `profile` reads: loaded from `path` when non-empty (they
// must be for `shape`'s layers x kv_heads, else InvalidArgument naming both);
// null when the path is empty and the profile needs none; InvalidArgument
// with a hint on how to get a score file when it needs them and none is given.
Result<std::unique_ptr<HeadScores>> LoadHeadScoresFor(const Profile& profile,
                                                      const std::string& path,
                                                      const KvShape& shape);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_PROFILE_INPUTS_H_
