// Copyright kvserve authors. rans_decode.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/rans_decode.cu"
