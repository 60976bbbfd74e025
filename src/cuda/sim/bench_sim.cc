// Copyright kvserve authors. bench.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/bench.cu"
