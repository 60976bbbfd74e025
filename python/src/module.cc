// Copyright kvserve authors. The `kvserve._kvserve` extension module. The
// public Python API is the `kvserve` package (python/kvserve/__init__.py),
// which re-exports these bindings with docstrings and type hints.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "errors.h"

PYBIND11_MODULE(_kvserve, m) {
  m.doc() = "kvserve native bindings; import `kvserve` instead.";
  kvserve::python::RegisterErrors(m);
  kvserve::python::RegisterProfile(m);
  kvserve::python::RegisterPaged(m);
  kvserve::python::RegisterCodec(m);
  kvserve::python::RegisterIo(m);
  kvserve::python::RegisterController(m);
  kvserve::python::RegisterFrameSizes(m);
  kvserve::python::RegisterProfiler(m);
  kvserve::python::RegisterTransport(m);
  kvserve::python::RegisterPool(m);
  kvserve::python::RegisterServe(m);
#ifdef KVSERVE_PY_CUDA
  kvserve::python::RegisterCuda(m);
#else
  m.def("cuda_available", [] { return false; }, "False: this build has no CUDA codec.");
  m.def("cuda_device_name", [] { return std::string(); });
#endif
}
