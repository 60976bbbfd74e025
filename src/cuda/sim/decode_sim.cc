// Copyright kvserve authors. decode.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/decode.cu"
