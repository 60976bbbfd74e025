// Copyright kvserve authors. rans_encode.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/rans_encode.cu"
