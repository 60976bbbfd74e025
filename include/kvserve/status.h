// Copyright kvserve authors. Error handling for the whole public API.
//
// kvserve never throws across its public API. Every fallible function returns
// a Status (success or an error code plus a human-readable message) or a
// Result<T> (a value or an error Status). Decoders return Corruption for any
// malformed input; they never assert on input bytes.
#ifndef KVSERVE_STATUS_H_
#define KVSERVE_STATUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvserve {

// Stable numbers: they appear in logs and in the wire protocol's error replies.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,    // caller passed something the contract forbids
  kCorruption = 2,         // input bytes (frame, file, message) are malformed
  kNotSupported = 3,       // valid but not implemented by this build/backend
  kOutOfRange = 4,         // a value lies outside its documented bounds
  kIOError = 5,            // the OS refused a read/write/open
  kResourceExhausted = 6,  // a size or memory bound would be exceeded
  kNotFound = 7,           // a named thing (file, key, tensor) does not exist
  kUnavailable = 8,        // a peer or service cannot be reached right now
  kTimeout = 9,            // a deadline passed
  kPermissionDenied = 10,  // authentication failed
  kInternal = 11,          // a kvserve bug: an invariant broke
};

// Returns the lower-case name of `code` ("corruption", ...). Never fails.
std::string_view StatusCodeName(StatusCode code);

// Thread-compatible value type. A default-constructed Status is OK.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corruption: chunk 3 checksum mismatch", or "ok".
  std::string ToString() const;
  // Returns a copy whose message is prefixed by `context` + ": ".
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a T or a non-OK Status. Accessing value() of an error Result is
// a programming error (checked with an assert in debug builds).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}     // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvserve

#define KVSERVE_CONCAT_INNER_(a, b) a##b
#define KVSERVE_CONCAT_(a, b) KVSERVE_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define KVSERVE_RETURN_IF_ERROR(expr)                \
  do {                                               \
    ::kvserve::Status kvserve_status_ = (expr);      \
    if (!kvserve_status_.ok()) return kvserve_status_; \
  } while (0)

// `lhs` = value of the Result `rexpr`, or return its Status.
#define KVSERVE_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVSERVE_ASSIGN_OR_RETURN_IMPL_(KVSERVE_CONCAT_(kvserve_result_, __LINE__), lhs, rexpr)
#define KVSERVE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                   \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

#endif  // KVSERVE_STATUS_H_
