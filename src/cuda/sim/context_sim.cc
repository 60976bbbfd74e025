// Copyright kvserve authors. context.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/context.cu"
