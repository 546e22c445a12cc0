// Status / Result<T>: how the runtime reports errors on user input without aborting or throwing.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace hybridgen::rt {

/// Error categories; Python bindings map them to exception classes.
enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // bad config, bad ids, out-of-range positions
  kExhausted,        // every tier that may take the data is full
  kSystem,           // mmap/mbind/libnuma failed
  kNotFound,         // unknown sequence / tier / segment
};

/// A success flag plus a human-readable message; cheap to return by value.
class Status {
public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }

  bool isOk() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return code_; }
  const std::string &message() const { return message_; }

private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status exhausted(std::string m) { return {ErrorCode::kExhausted, std::move(m)}; }
inline Status systemError(std::string m) { return {ErrorCode::kSystem, std::move(m)}; }
inline Status notFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }

/// The one exception type of the C++ API's throwing helpers (`valueOrThrow`); carries the Status so
/// bindings can translate the code.
class Error : public std::runtime_error {
public:
  explicit Error(Status s) : std::runtime_error(s.message()), status_(std::move(s)) {}
  const Status &status() const { return status_; }

private:
  Status status_;
};

/// Either a value or a non-ok Status (an `expected` for C++17).
template <typename T> class Result {
public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {}   // NOLINT: implicit on purpose

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  const Status &status() const {
    static const Status okStatus;
    return isOk() ? okStatus : std::get<Status>(v_);
  }
  T &value() { return std::get<T>(v_); }
  const T &value() const { return std::get<T>(v_); }
  T &operator*() { return value(); }
  T *operator->() { return &value(); }
  /// Moves the value out, or throws hybridgen::rt::Error.
  T valueOrThrow() && {
    if (!isOk())
      throw Error(std::get<Status>(v_));
    return std::move(std::get<T>(v_));
  }

private:
  std::variant<T, Status> v_;
};

inline void throwIfError(const Status &s) {
  if (!s.isOk())
    throw Error(s);
}

} // namespace hybridgen::rt
