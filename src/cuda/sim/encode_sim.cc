// Copyright kvserve authors. encode.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/encode.cu"
