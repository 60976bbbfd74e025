// Copyright kvserve authors.
#include "errors.h"

#include <array>

namespace kvserve::python {
namespace py = pybind11;
namespace {

struct ErrorClass {
  StatusCode code;
  const char* name;          // attribute name in the module
  PyObject* builtin;         // second base besides KvserveError (may be null)
  const char* doc;
};

// Indexed by StatusCode number; filled by RegisterErrors.
std::array<PyObject*, 16> g_classes{};
PyObject* g_base = nullptr;

PyObject* NewClass(py::module_& m, const char* name, const char* doc, PyObject* bases) {
  const std::string qualified = std::string("kvserve.") + name;  // the public package
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // steals nothing: add_object increfs
  return cls;
}

}  // namespace

Status StatusFromPython(const py::error_already_set& error) {
  const std::string message = py::str(error.value()).cast<std::string>();
  for (size_t code = 0; code < g_classes.size(); ++code) {
    if (g_classes[code] != nullptr && error.matches(py::handle(g_classes[code])))
      return Status(static_cast<StatusCode>(code), message);
  }
  const std::string type = py::str(error.type().attr("__name__")).cast<std::string>();
  return Status::Internal(type + ": " + message);
}

void RegisterErrors(py::module_& m) {
  g_base = NewClass(m, "KvserveError",
                    "Base class of every error kvserve reports. `code` is the lower-case "
                    "StatusCode name (\"corruption\", ...); str(e) is the library's message.",
                    PyExc_Exception);
  const ErrorClass classes[] = {
      {StatusCode::kInvalidArgument, "KvserveInvalidArgumentError", PyExc_ValueError,
       "The caller passed something the contract forbids (shape, dtype, profile, ...)."},
      {StatusCode::kCorruption, "KvserveCorruptionError", PyExc_ValueError,
       "Input bytes (a frame, a file) are malformed, truncated or fail a checksum."},
      {StatusCode::kNotSupported, "KvserveNotSupportedError", PyExc_NotImplementedError,
       "Valid, but not implemented by this build or backend (e.g. CUDA tensors)."},
      {StatusCode::kOutOfRange, "KvserveOutOfRangeError", PyExc_ValueError,
       "A value lies outside its documented bounds."},
      {StatusCode::kIOError, "KvserveIOError", PyExc_OSError, "The OS refused a read/write/open."},
      {StatusCode::kResourceExhausted, "KvserveResourceExhaustedError", PyExc_MemoryError,
       "A size or memory bound would be exceeded (e.g. the `out` buffer is too small)."},
      {StatusCode::kNotFound, "KvserveNotFoundError", PyExc_LookupError,
       "A named thing (file, workload, parameter) does not exist."},
      {StatusCode::kUnavailable, "KvserveUnavailableError", PyExc_ConnectionError,
       "A peer or service cannot be reached right now."},
      {StatusCode::kTimeout, "KvserveTimeoutError", PyExc_TimeoutError, "A deadline passed."},
      {StatusCode::kPermissionDenied, "KvservePermissionDeniedError", PyExc_PermissionError,
       "Authentication failed."},
      {StatusCode::kInternal, "KvserveInternalError", PyExc_RuntimeError,
       "A kvserve bug: an internal invariant broke."},
  };
  for (const auto& c : classes) {
    py::tuple bases = py::make_tuple(py::handle(g_base), py::handle(c.builtin));
    g_classes[static_cast<size_t>(c.code)] = NewClass(m, c.name, c.doc, bases.ptr());
  }

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* cls = g_classes[static_cast<size_t>(e.status.code()) % g_classes.size()];
      if (cls == nullptr) cls = g_base;
      py::object exc = py::reinterpret_steal<py::object>(
          PyObject_CallFunction(cls, "s", e.status.message().c_str()));
      if (!exc) return;  // the call set its own error
      PyObject_SetAttrString(exc.ptr(), "code",
                             py::str(std::string(StatusCodeName(e.status.code()))).ptr());
      PyErr_SetObject(cls, exc.ptr());
    }
  });
}

}  // namespace kvserve::python
