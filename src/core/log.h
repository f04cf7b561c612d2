// Debug logging to stderr, switched on by VISATTN_LOG=debug.
#pragma once

#include <string>

namespace visattn {

bool debug_log_enabled();
void debug_log(const std::string& message);  // prints "visattn: <message>" when enabled

}  // namespace visattn
