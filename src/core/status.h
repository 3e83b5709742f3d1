#pragma once

// Errors as values. Every foreign error space (errno, sqlite rc, CUresult,
// nvmlReturn_t, HTTP status) is translated into a Status in exactly one place
// per API. Status is cheap to return when ok (no allocation); an error carries
// a message meant for a human, naming the bad input.

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpuslice::core {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // The caller's input is malformed or out of range.
  kNotFound,           // A named thing (job, device, file) does not exist.
  kAlreadyExists,      // A thing that must be unique exists already.
  kPermissionDenied,   // The caller may not do this.
  kResourceExhausted,  // Out of memory, capacity or quota right now.
  kFailedPrecondition, // The system is not in a state that allows this.
  kOutOfRange,         // A value is valid in general but not here.
  kUnavailable,        // Temporarily unavailable (daemon degraded, busy).
  kUnimplemented,      // Not supported by this build or device.
  kDeadlineExceeded,   // Timed out.
  kAborted,            // Gave up because of a concurrent change.
  kInternal,           // A bug or a broken invariant.
};

// The stable lower-case name of a code, as used in JSON errors and logs.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // Ok.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: bad size '12XB': unknown unit 'XB'" or "ok".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status AlreadyExistsError(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status PermissionDeniedError(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}
inline Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status OutOfRangeError(std::string m) {
  return Status(StatusCode::kOutOfRange, std::move(m));
}
inline Status UnavailableError(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status UnimplementedError(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
inline Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

// Either a value or a non-ok Status. Accessing value() of an error is a bug
// (checked by assert in debug builds).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design.
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design.
    if (std::get<Status>(v_).ok()) {
      v_ = Status(StatusCode::kInternal, "Result constructed from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // Ok() when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T value_or(T fallback) const { return ok() ? std::get<T>(v_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gpuslice::core

#define GPUSLICE_CONCAT_INNER_(a, b) a##b
#define GPUSLICE_CONCAT_(a, b) GPUSLICE_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (a Status) is an error.
#define GPUSLICE_RETURN_IF_ERROR(expr)                    \
  do {                                                    \
    ::gpuslice::core::Status gpuslice_status_ = (expr);   \
    if (!gpuslice_status_.ok()) return gpuslice_status_;  \
  } while (0)

// `lhs` = the value of `expr` (a Result<T>), or return its error.
#define GPUSLICE_ASSIGN_OR_RETURN(lhs, expr) \
  GPUSLICE_ASSIGN_OR_RETURN_IMPL_(GPUSLICE_CONCAT_(gpuslice_result_, __LINE__), lhs, expr)
#define GPUSLICE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
