#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace visattn {

bool debug_log_enabled() {
  static const bool enabled = [] {
    const char* level = std::getenv("VISATTN_LOG");
    return level != nullptr && std::strcmp(level, "debug") == 0;
  }();
  return enabled;
}

void debug_log(const std::string& message) {
  if (debug_log_enabled()) std::fprintf(stderr, "visattn: %s\n", message.c_str());
}

}  // namespace visattn
