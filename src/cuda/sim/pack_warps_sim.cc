// Copyright kvserve authors. pack_warps.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/pack_warps.cu"
