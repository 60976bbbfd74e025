#include "kvserve/status.h"

namespace kvserve {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kNotSupported: return "not supported";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kIOError: return "io error";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kPermissionDenied: return "permission denied";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace kvserve
