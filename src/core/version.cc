// Copyright kvserve authors. The linked library's version (kvserve/version.h).
#include "kvserve/version.h"

namespace kvserve {

int LibraryVersion() { return KVSERVE_VERSION_NUMBER; }
const char* LibraryVersionString() { return KVSERVE_VERSION_STRING; }
bool LibraryHasCuda() { return KVSERVE_HAVE_CUDA != 0; }

}  // namespace kvserve
