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
  // The backend declined the case before running it (Backend::declines: an option, a head dim
  // or an alignment it does not take): why. Only a decline skips; an error the backend raises
  // while running is a failed verdict, whatever its code.
  std::string skipped;
};

// Builds the case's data, runs `backend` on it and the oracle beside it, and judges the
// output, the LSE and that nothing outside the outputs was written. Never throws for a
// backend failure: that becomes a failed verdict.
CaseResult run_case(const CaseSpec& spec, std::string_view backend);

// Why `backend` cannot run this case (a dtype or head dim it does not support), or empty.
// (What a backend declines for a case's strides or options shows when the case is built:
// CaseResult::skipped.)
std::string unsupported_by(std::string_view backend, const CaseSpec& spec);

// Why the backend named `backend` declines these views, asked the way attention() asks it (on
// the validated params, before running), or empty. "auto" declines nothing: it passes such
// calls to another backend. Invalid arguments are not a decline: attention() raises them.
std::string declined_by(std::string_view backend, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const VarlenBatch& batch,
                        const AttentionOptions& options);

// The category of a skip reason, for summaries: the text before its first ':' ("window",
// "alignment", ...), or all of it.
std::string skip_category(const std::string& reason);

// The command line that reruns exactly this case.
std::string reproduce_command(const CaseSpec& spec, std::string_view backend);

}  // namespace visattn::check
