// Copyright kvserve authors. kvserve Status -> Python exceptions.
//
// Every error the library reports becomes an exception whose message is the
// library's own (Status::message()), of a class chosen by the StatusCode:
//
//   KvserveError(Exception)                      base; .code is the StatusCode name
//   KvserveInvalidArgumentError(.., ValueError)  invalid_argument
//   KvserveCorruptionError(.., ValueError)       corruption (malformed frame bytes)
//   KvserveOutOfRangeError(.., ValueError)       out_of_range
//   KvserveNotSupportedError(.., NotImplementedError)
//   KvserveIOError(.., OSError), KvserveNotFoundError(.., LookupError),
//   KvserveResourceExhaustedError(.., MemoryError),
//   KvserveUnavailableError(.., ConnectionError), KvserveTimeoutError(.., TimeoutError),
//   KvservePermissionDeniedError(.., PermissionError),
//   KvserveInternalError(.., RuntimeError)
#ifndef KVSERVE_PYTHON_ERRORS_H_
#define KVSERVE_PYTHON_ERRORS_H_

#include <pybind11/pybind11.h>

#include <string>

#include "kvserve/status.h"

namespace kvserve::python {

// Creates the exception classes as attributes of `m`. Call once at import.
void RegisterErrors(pybind11::module_& m);

// The Status a Python exception stands for, for passing it back into the
// library (e.g. from a callback): a kvserve exception class maps back to its
// code with the exception's message; any other exception is Internal,
// "<type>: <message>". Call with the GIL held.
Status StatusFromPython(const pybind11::error_already_set& error);

// Thrown from binding code (with or without the GIL); pybind11 translates it
// into the exception class of `status.code()` once the GIL is re-acquired.
struct StatusError {
  Status status;
};

// Throws StatusError when `status` is not OK.
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError{status};
}
template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw StatusError{result.status()};
  return std::move(result).value();
}

// Shorthand for binding-level argument errors (wrong shape, wrong type of
// object): the same exception class as the library's InvalidArgument.
[[noreturn]] inline void ThrowInvalid(std::string message) {
  throw StatusError{Status::InvalidArgument(std::move(message))};
}
[[noreturn]] inline void ThrowNotSupported(std::string message) {
  throw StatusError{Status::NotSupported(std::move(message))};
}

}  // namespace kvserve::python

#endif  // KVSERVE_PYTHON_ERRORS_H_
