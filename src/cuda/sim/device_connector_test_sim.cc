// Copyright kvserve authors. The device connector tests (device_connector_test.cu) on the host CUDA simulator.
#include "cuda/device_connector_test.cu"
