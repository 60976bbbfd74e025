// Copyright kvserve authors. The windowed encoder/decoder tests (windows_test.cu) on the host CUDA simulator.
#include "cuda/windows_test.cu"
