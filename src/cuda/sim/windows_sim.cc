// Copyright kvserve authors. windows.cu compiled for the host CUDA simulator (include/sim.h).
#include "cuda/windows.cu"
