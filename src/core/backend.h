// The interface every backend implements, and the one table that lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "visattn/attention.h"
#include "visattn/params.h"

namespace visattn {

struct Backend {
  const char* name;
  const char* description;
  DeviceType device;
  int auto_priority;           // "auto" picks the highest that is available and supports the call
  std::vector<DType> dtypes;   // dtypes it runs
  std::vector<int> head_dims;  // head dims it runs; empty means any up to max_head_dim
  int max_head_dim;            // 0: no limit
  // Empty when the backend can run on this machine; otherwise why not.
  std::string (*unavailable_reason)();
  // What runs on this machine (e.g. the SIMD path); may be null.
  std::string (*detail)();
  // Runs validated params. Never validates user input, never allocates device memory.
  void (*run)(const AttentionParams& params);
  // Why it declines these validated params (an option, a head dim, a stride or an alignment it
  // cannot take), or nothing; null: it takes every call of its dtypes and head dims. Pure (reads
  // no tensor, asks no device), checked before run: "auto" passes such calls to another
  // backend, an explicit choice fails with the reason (ErrorCode::unsupported), and
  // `visattn check` counts the case as skipped with it.
  std::optional<std::string> (*declines)(const AttentionParams& params) = nullptr;
  // Plans built so far in this process, for backends that build plans; null otherwise.
  int64_t (*plans_built)() = nullptr;
  // Calls for which "auto" tries this backend before those of higher auto_priority (shapes
  // where the bench shows it faster); null: none.
  bool (*auto_prefers)(const AttentionParams& params) = nullptr;
};

// Every backend compiled into this build, in a fixed order.
const std::vector<Backend>& backend_table();

// Resolves `requested` ("auto" or a name) for params, or throws naming what was asked,
// why it cannot run and what can.
const Backend& select_backend(std::string_view requested, const AttentionParams& params);

}  // namespace visattn
