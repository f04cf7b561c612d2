// Runs one check case on a backend and judges it by the tolerance rule.
#pragma once

#include <string>
#include <string_view>

#include "check/case.h"
#include "check/tolerance.h"

namespace visattn::check {

struct CaseResult {
  CaseSpec spec;
  Verdict verdict;
};

// Builds the case's data, runs `backend` on it and the oracle beside it, and judges the
// output, the LSE and that nothing outside the outputs was written. Never throws for a
// backend failure: that becomes a failed verdict.
CaseResult run_case(const CaseSpec& spec, std::string_view backend);

// Why `backend` cannot run this case (a dtype or head dim it does not support), or empty.
std::string unsupported_by(std::string_view backend, const CaseSpec& spec);

// The command line that reruns exactly this case.
std::string reproduce_command(const CaseSpec& spec, std::string_view backend);

}  // namespace visattn::check
