// Copyright kvserve authors. Forwarding header: the stage interfaces live in
// core/stages.h (below the stage areas and the pipeline). Kept for src/cuda,
// whose includes its owner moves; new code includes core/stages.h.
#ifndef KVSERVE_PIPELINE_STAGES_H_
#define KVSERVE_PIPELINE_STAGES_H_

#include "core/stages.h"  // IWYU pragma: export

#endif  // KVSERVE_PIPELINE_STAGES_H_
