"""A first GPU timing of the cuda backend beside torch's per-image SDPA (flash) and varlen_attn,
on the public workloads, bf16, until `visattn bench` times GPU backends itself:
    python3 bench/gpu_first_look.py ../shared/workloads.json
FLOPs = 4 * sum(s^2) * heads * head_dim. Median of timed replays (triton.testing.do_bench)."""

import json
import sys

import torch
import torch.nn.functional as F
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel

import visattn


def main(path):
    torch.manual_seed(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm = 2 * 8192**3 / tt.do_bench(lambda: a @ a, return_mode="median") / 1e9
    print(f"bf16 GEMM ceiling: {gemm:.0f} TFLOP/s")
    print(f"{'workload':26} {'visattn cuda':>13} {'sdpa flash loop':>16} {'varlen_attn':>12}  (TFLOP/s)")
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        varlen_attn = None
    for w in json.load(open(path))["workloads"]:
        lengths, h, d = w["seqlens"], w["heads"], w["head_dim"]
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        q, k, v = torch.randn(3, cu[-1], h, d, device="cuda", dtype=torch.bfloat16).unbind(0)
        batch = visattn.VarlenBatch(cu)
        flops = 4.0 * sum(n * n for n in lengths) * h * d

        def per_image():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                for s, e in zip(cu[:-1], cu[1:]):
                    F.scaled_dot_product_attention(*(x[s:e].transpose(0, 1)[None] for x in (q, k, v)))

        rates = [flops / tt.do_bench(lambda: visattn.attention(q, k, v, batch=batch), return_mode="median") / 1e9,
                 flops / tt.do_bench(per_image, return_mode="median") / 1e9]
        if varlen_attn is not None:
            cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
            try:
                rates.append(flops / tt.do_bench(lambda: varlen_attn(q, k, v, cu_t, cu_t, max(lengths), max(lengths)),
                                                 return_mode="median") / 1e9)
            except Exception as error:  # noqa: BLE001 - report and go on
                print("varlen_attn:", type(error).__name__, str(error)[:80])
        print(f"{w['name']:26} " + " ".join(f"{r:13.1f}" for r in rates), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/workloads.json")
