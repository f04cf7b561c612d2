// Builds the messages of visattn::Error: "argument: what is wrong (expected, got)".
#pragma once

#include <sstream>
#include <string>

#include "visattn/error.h"

namespace visattn {

// Concatenates any streamable values into one string.
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <typename... Parts>
[[noreturn]] void fail(ErrorCode code, const Parts&... parts) {
  throw Error(code, concat(parts...));
}

}  // namespace visattn
