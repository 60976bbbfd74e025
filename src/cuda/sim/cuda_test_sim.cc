// Copyright kvserve authors. The CUDA consistency tests (cuda_test.cu) on the host CUDA simulator.
#include "cuda/cuda_test.cu"
