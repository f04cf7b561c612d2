// visattn: the one exception type of the library.
#pragma once

#include <stdexcept>
#include <string>

namespace visattn {

// What kind of mistake an Error reports; Python maps these to exception classes.
enum class ErrorCode {
  invalid_value,        // a value is out of range or inconsistent (ValueError)
  invalid_type,         // a dtype, device or rank is wrong (TypeError)
  unsupported,          // valid input the chosen backend cannot run (ValueError)
  backend_unavailable,  // the backend is not built in or not usable here (RuntimeError)
  internal,             // a bug or a failure below us (RuntimeError)
};

const char* error_code_name(ErrorCode code);

// Thrown by every public function. The message names the argument, the expected and the
// actual value. When attention() throws, its outputs are untouched.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace visattn
