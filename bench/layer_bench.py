"""GPU bench of the whole attention layer (issue 7's bar): visattn's VisionAttentionLayer against
the same layer in eager PyTorch (Hugging Face's Qwen2.5-VL / InternViT code path: nn.Linear qkv,
rope in fp32, per-image SDPA, nn.Linear proj) with each SDPA kernel, timed in one process on the
same weights and tensors, bf16:

    python3 bench/layer_bench.py [--workloads FILE] [--json FILE] [--only NAME,...]

Layers: qwen25vl-* workloads as Qwen2.5-VL's vision attention (embed 1280, 16 heads of 80,
qkv and proj bias, 2D rope); internvit6b-uniform16 as InternViT-6B's (embed 3200, 25 heads of
128, QK RMSNorm over the hidden size). FLOPs = 2 T E (q+2kv features) + 2 T E (heads head_dim)
+ 4 sum(s^2) heads head_dim; time = median of triton.testing.do_bench (L2 flushed).
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel

import visattn

LAYERS = {  # workload -> (embed, heads, head_dim, qk_norm, rope)
    "qwen25vl-mixed32": (1280, 16, 80, "none", True),
    "qwen25vl-large4": (1280, 16, 80, "none", True),
    "qwen25vl-window": (1280, 16, 80, "none", True),
    "internvit6b-uniform16": (3200, 25, 128, "full", False),
}
SDPA_KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}


def median_ms(fn):
    return tt.do_bench(fn, warmup=10, rep=100, return_mode="median")


class EagerLayer(torch.nn.Module):
    """The layer as transformers writes it (Qwen2_5_VLVisionAttention, InternVLVisionAttention)."""

    def __init__(self, embed, heads, head_dim, qk_norm):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = torch.nn.Linear(embed, 3 * heads * head_dim, bias=True)
        self.proj = torch.nn.Linear(heads * head_dim, embed, bias=True)
        self.q_norm = torch.nn.RMSNorm(heads * head_dim, eps=1e-6) if qk_norm == "full" else None
        self.k_norm = torch.nn.RMSNorm(heads * head_dim, eps=1e-6) if qk_norm == "full" else None

    @staticmethod
    def rope(x, cos, sin):  # apply_rotary_pos_emb_vision: fp32 math, back to the dtype
        dtype, x = x.dtype, x.float()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return (x * cos.unsqueeze(-2) + rotated * sin.unsqueeze(-2)).to(dtype)

    def forward(self, x, lengths, cos, sin, kernel):
        tokens = x.shape[0]
        q, k, v = self.qkv(x).reshape(tokens, 3, self.heads, -1).permute(1, 0, 2, 3).unbind(0)
        if self.q_norm is not None:
            q = self.q_norm(q.reshape(tokens, -1)).view(tokens, self.heads, -1)
            k = self.k_norm(k.reshape(tokens, -1)).view(tokens, self.heads, -1)
        if cos is not None:
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        with sdpa_kernel(kernel):
            outs = [F.scaled_dot_product_attention(qi, ki, vi)
                    for qi, ki, vi in zip(*(torch.split(t, lengths, dim=2) for t in (q, k, v)))]
        out = torch.cat(outs, dim=2)[0].transpose(0, 1).reshape(tokens, -1)
        return self.proj(out)


def randomize(module):
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, device="cuda", generator=gen)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.1 * noise if name.endswith("bias")
                    else noise / p.shape[-1] ** 0.5)
    return module


def rope_tables(lengths, head_dim):
    """Half-width 2D rope tables (row, column of a square-ish patch grid per image), f32."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim // 2, 2, device="cuda").float() / (head_dim // 2)))
    rows = []
    for n in lengths:
        side = max(1, int(n ** 0.5))
        i = torch.arange(n, device="cuda")
        rows.append(torch.cat([torch.outer((i // side).float(), inv_freq), torch.outer((i % side).float(), inv_freq)], -1))
    half = torch.cat(rows)
    return half


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="bench/public_workloads.json")
    parser.add_argument("--json", help="write bench JSON here")
    parser.add_argument("--only", help="comma-separated workload names")
    args = parser.parse_args()
    specs = [s for s in json.load(open(args.workloads))["workloads"] if s["name"] in LAYERS]
    if args.only:
        specs = [s for s in specs if s["name"] in args.only.split(",")]
    dtype = torch.bfloat16
    results = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, visattn {visattn.__version__}, "
          f"GEMMs: {visattn.info()['layer_gemm']['cuda']}")
    print(f"{'layer':26}{'visattn':>10}" + "".join(f"{'eager-' + k:>17}" for k in SDPA_KERNELS) + f"{'ratio':>8}")
    for spec in specs:
        embed, heads, head_dim, qk_norm, rope = LAYERS[spec["name"]]
        lengths = spec["seqlens"]
        tokens = sum(lengths)
        flops = 2.0 * tokens * embed * 4 * heads * head_dim + 4.0 * sum(n * n for n in lengths) * heads * head_dim
        eager = randomize(EagerLayer(embed, heads, head_dim, qk_norm).to("cuda", dtype)).eval()
        x = torch.randn(tokens, embed, device="cuda", dtype=dtype)
        half = rope_tables(lengths, head_dim) if rope else None
        full = torch.cat([half, half], -1) if rope else None
        cos, sin = (full.cos(), full.sin()) if rope else (None, None)
        cos_half, sin_half = (half.cos().contiguous(), half.sin().contiguous()) if rope else (None, None)
        layer = visattn.VisionAttentionLayer.from_state_dict(
            eager.state_dict(), embed, heads, qk_norm=qk_norm, rope="rotate_half" if rope else "none")
        batch = visattn.VarlenBatch(lengths=lengths).prepare("cuda")
        out = torch.empty_like(x)
        timings = {}
        with torch.no_grad():
            ours = lambda: layer(x, batch, cos=cos_half, sin=sin_half, out=out)  # noqa: E731
            expected = ours().float()
            timings["visattn"] = median_ms(ours)
            for name, kernel in SDPA_KERNELS.items():
                try:
                    call = lambda kernel=kernel: eager(x, lengths, cos, sin, kernel)  # noqa: E731
                    err = (call().float() - expected).abs().max().item()
                    timings[f"eager-{name}"] = median_ms(call)
                except Exception as error:  # noqa: BLE001 - a kernel that cannot run this shape is reported
                    print(f"  eager-{name} on {spec['name']}: {type(error).__name__}: {str(error).splitlines()[0][:100]}",
                          file=sys.stderr)
                    continue
                if err > 0.1:
                    print(f"  eager-{name} on {spec['name']}: differs from visattn by {err:.3g}", file=sys.stderr)
        best = min((ms for name, ms in timings.items() if name != "visattn"), default=float("nan"))
        line = f"{spec['name']:26}{flops / timings['visattn'] / 1e9:10.1f}"
        line += "".join(f"{flops / timings[f'eager-{k}'] / 1e9:17.1f}" if f"eager-{k}" in timings else f"{'-':>17}"
                        for k in SDPA_KERNELS)
        print(line + f"{best / timings['visattn']:8.2f}", flush=True)
        for name, ms in timings.items():
            results.append({"workload": f"layer:{spec['name']}", "backend": name if name == "visattn" else f"peer:{name}",
                            "dtype": "bf16", "heads": heads, "head_dim": head_dim, "embed_dim": embed,
                            "images": len(lengths), "tokens": tokens, "ms": ms, "tflops": flops / ms / 1e9,
                            "tokens_per_s": tokens / ms * 1e3})
        del eager, layer, x, out
        torch.cuda.empty_cache()
    print("(TFLOP/s of the layer, median; ratio = best eager time / visattn time)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__},
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
