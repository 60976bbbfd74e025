// Copyright kvserve authors. A Python bytes-like object held for the
// duration of a native call.
#ifndef KVSERVE_PYTHON_HELD_BYTES_H_
#define KVSERVE_PYTHON_HELD_BYTES_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>

#include "errors.h"

namespace kvserve::python {

// A held, read-only, C-contiguous byte buffer (bytes, bytearray, memoryview,
// a Frame, a C-contiguous numpy array): the buffer stays valid, and its
// owner alive, until this object is destroyed, so span() may be used with
// the GIL released. Construct and destroy with the GIL held.
// InvalidArgument when `object` does not export a C-contiguous buffer;
// `what` names the argument in the message.
class HeldBytes {
 public:
  HeldBytes(pybind11::handle object, const char* what) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      pybind11::error_already_set error;
      ThrowInvalid(std::string(what) +
                   ": expected a bytes-like object (bytes, bytearray, memoryview, Frame): " +
                   pybind11::str(error.value()).cast<std::string>());
    }
  }
  ~HeldBytes() { PyBuffer_Release(&view_); }
  HeldBytes(const HeldBytes&) = delete;
  HeldBytes& operator=(const HeldBytes&) = delete;
  std::span<const uint8_t> span() const {
    return {static_cast<const uint8_t*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

}  // namespace kvserve::python

#endif  // KVSERVE_PYTHON_HELD_BYTES_H_
