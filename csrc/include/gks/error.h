// SPDX-License-Identifier: Apache-2.0
// gks::Error: the one exception type the C++ API throws. Its kind tells a binding which
// exception to raise in the host language (ValueError, TypeError, RuntimeError).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gks {

enum class ErrorKind {
  kInvalidArgument,   // a shape, stride, device or value the op does not accept
  kUnsupportedDtype,  // a dtype the op does not implement
  kCudaError,         // the CUDA runtime reported a failure
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
// Builds a message with operator<< and throws it when it goes out of scope.
class ErrorBuilder {
 public:
  explicit ErrorBuilder(ErrorKind kind) : kind_(kind) {}
  ErrorBuilder(const ErrorBuilder&) = delete;
  ErrorBuilder& operator=(const ErrorBuilder&) = delete;
  ~ErrorBuilder() noexcept(false) { throw Error(kind_, stream_.str()); }
  template <typename T>
  ErrorBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  ErrorKind kind_;
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace gks

// GKS_CHECK(cond, kind) << "message";  throws gks::Error(kind, message) when cond is false.
#define GKS_CHECK(cond, kind) \
  if (cond) {                 \
  } else                      \
    ::gks::detail::ErrorBuilder(::gks::ErrorKind::kind)
