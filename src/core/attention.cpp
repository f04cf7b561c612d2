#include "core/backend.h"
#include "core/validate.h"
#include "visattn/attention.h"

namespace visattn {

void attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const VarlenBatch& batch, const AttentionOptions& options,
               std::string_view backend) {
  const AttentionParams params = validate_attention_args(q, k, v, out, batch, options);
  const Backend& chosen = select_backend(backend, params);
  if (params.total_tokens == 0) return;  // nothing to write
  chosen.run(params);
}

}  // namespace visattn
