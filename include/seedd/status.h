// Errors as values: Status and Result<T>.
//
// Thread safety: a Status or Result is a value; distinct objects may be used from
// different threads, one object needs external synchronization.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace seedd {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,
  kFailedPrecondition,
  kDeadlineExceeded,
  kUnavailable,
  kDataLoss,
  kIoError,
  kInternal,
  kCancelled,  // stopped on request (a signal); what was done is kept
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, msg}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, msg}; }
  static Status AlreadyExists(std::string msg) { return {StatusCode::kAlreadyExists, msg}; }
  static Status PermissionDenied(std::string msg) { return {StatusCode::kPermissionDenied, msg}; }
  static Status Unauthenticated(std::string msg) { return {StatusCode::kUnauthenticated, msg}; }
  static Status ResourceExhausted(std::string msg) { return {StatusCode::kResourceExhausted, msg}; }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, msg};
  }
  static Status DeadlineExceeded(std::string msg) { return {StatusCode::kDeadlineExceeded, msg}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, msg}; }
  static Status DataLoss(std::string msg) { return {StatusCode::kDataLoss, msg}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, msg}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, msg}; }
  static Status Cancelled(std::string msg) { return {StatusCode::kCancelled, msg}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The human-readable reason; empty for Ok.
  const std::string& message() const { return message_; }
  // "<CodeName>: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>".
  Status WithContext(std::string_view prefix) const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a T or a non-Ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : rep_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : rep_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(rep_).ok() && "Result built from an Ok status");
  }

  bool ok() const { return std::holds_alternative<T>(rep_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(rep_);
  }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(rep_); }
  const T& value() const& { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> rep_;
};

}  // namespace seedd

// Evaluates expr (a Status); returns it from the current function when not Ok.
#define SEEDD_RETURN_IF_ERROR(expr)         \
  do {                                      \
    ::seedd::Status seedd_status_ = (expr); \
    if (!seedd_status_.ok()) {              \
      return seedd_status_;                 \
    }                                       \
  } while (0)
