// Copyright kvserve authors. Registration entry points of the binding files.
#ifndef KVSERVE_PYTHON_BINDINGS_H_
#define KVSERVE_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace kvserve {
class KvPool;
}

namespace kvserve::python {

// python/src/profile_bindings.cc: Profile, parameters, presets.
void RegisterProfile(pybind11::module_& m);
// python/src/codec_bindings.cc: Frame, FrameInfo, HeadScores, Encoder,
// Decoder, inspect.
void RegisterCodec(pybind11::module_& m);
// python/src/paged_bindings.cc: PagedKv (paged caches with a block table).
void RegisterPaged(pybind11::module_& m);
// python/src/io_bindings.cc: KV files and the synthetic generators.
void RegisterIo(pybind11::module_& m);
// python/src/controller_bindings.cc: ProfileTable, BandwidthEstimator,
// Controller, latency model helpers.
void RegisterController(pybind11::module_& m);
// python/src/frame_size_bindings.cc: FrameSizeModel (per-request frame
// sizes for the controller).
void RegisterFrameSizes(pybind11::module_& m);
// python/src/profiler_bindings.cc: StrategySpace, codec metrics, the
// profiling search with a Python evaluator, the task-quality statistics.
void RegisterProfiler(pybind11::module_& m);
// python/src/transport_bindings.cc: transports (TCP, UCX), authenticated
// connections with shaping and goodput samples, layer-streamed frames.
void RegisterTransport(pybind11::module_& m);
// python/src/pool_bindings.cc: KV pools (memory, remote client, server)
// and the prefix hash.
void RegisterPool(pybind11::module_& m);
// CUDA codec bindings (cuda_bindings.cc; only in CUDA builds).
void RegisterCuda(pybind11::module_& m);
// python/src/serve_bindings.cc: the serving workers around a Python engine,
// the serve client, the device connector.
void RegisterServe(pybind11::module_& m);
// The KvPool behind a kvserve.KvPool object (pool_bindings.cc); it lives as
// long as that object.
KvPool* PoolFromPython(pybind11::handle pool);

}  // namespace kvserve::python

#endif  // KVSERVE_PYTHON_BINDINGS_H_
