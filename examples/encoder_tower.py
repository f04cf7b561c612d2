"""A Qwen2.5-VL-style vision tower with random weights, end to end: for each block RMSNorm ->
visattn.VisionAttentionLayer (fused qkv, 2D rope, attention within each window or frame, proj)
-> residual -> RMSNorm -> SwiGLU MLP -> residual. Windowed blocks use visattn's window layout
(the tokens are put in window order once, before the first block, as the model does); every
`--full-every`-th block attends over whole frames. Prints tokens/s.

    python3 examples/encoder_tower.py [--device cuda] [--blocks 32] [--images 8] [--side 48]
"""

import argparse
import time

import torch

import visattn


class Block(torch.nn.Module):
    def __init__(self, embed, heads, mlp, dtype, device):
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.norm1 = torch.nn.RMSNorm(embed, eps=1e-6, **kw)
        self.norm2 = torch.nn.RMSNorm(embed, eps=1e-6, **kw)
        qkv = torch.nn.Linear(embed, 3 * embed, **kw)
        proj = torch.nn.Linear(embed, embed, **kw)
        self.gate_up = torch.nn.Linear(embed, 2 * mlp, **kw)
        self.down = torch.nn.Linear(mlp, embed, **kw)
        for linear in (qkv, proj, self.gate_up, self.down):
            torch.nn.init.normal_(linear.weight, std=linear.in_features ** -0.5)
            torch.nn.init.normal_(linear.bias, std=0.02)
        self._linears = (qkv, proj)  # keeps the tensors the layer reads alive
        self.attn = visattn.VisionAttentionLayer(
            embed, heads, {"qkv_weight": qkv.weight, "qkv_bias": qkv.bias, "proj_weight": proj.weight,
                           "proj_bias": proj.bias}, rope="rotate_half")

    def forward(self, x, batch, cos, sin):
        x = x + self.attn(self.norm1(x), batch, cos=cos, sin=sin)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(gate) * up)


def rope_tables(grids, head_dim, merge, device):
    """Qwen2-VL's 2D rope (half width) for patches in merge-unit order: row and column frequencies."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim // 2, 2, dtype=torch.float32) / (head_dim // 2)))
    rows = []
    for t, h, w in grids:
        hpos = torch.arange(h).unsqueeze(1).expand(h, w)
        wpos = torch.arange(w).unsqueeze(0).expand(h, w)
        # tokens come merge unit by merge unit (merge x merge patches each)
        def units(p):
            return p.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).reshape(-1)
        hpos, wpos = units(hpos), units(wpos)
        rows += [torch.cat([torch.outer(hpos.float(), inv_freq), torch.outer(wpos.float(), inv_freq)], -1)] * t
    half = torch.cat(rows).to(device)
    return half.cos().contiguous(), half.sin().contiguous()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--blocks", type=int, default=None, help="default: 32 on a GPU, 4 on the CPU")
    parser.add_argument("--full-every", type=int, default=8, help="every n-th block attends over whole frames")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--side", type=int, default=None, help="patches per image side (even); default 48 GPU, 16 CPU")
    parser.add_argument("--embed", type=int, default=1280)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--mlp", type=int, default=3420)
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    blocks = args.blocks or (32 if gpu else 4)
    side = args.side or (48 if gpu else 16)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)

    # Images of a few sizes around `side`, as (t, h, w) patch grids; windows of 112 pixels.
    grids = [(1, side - 2 * (i % 3) * 2, side + 2 * (i % 2) * 2) for i in range(args.images)]
    layout = visattn.qwen25vl_window_layout(grids)
    tokens = sum(t * h * w for t, h, w in grids)
    cos, sin = rope_tables(grids, args.embed // args.heads, 2, args.device)
    order = torch.from_numpy(layout.permutation).to(args.device)
    cos, sin = cos[order].contiguous(), sin[order].contiguous()  # rope follows the tokens
    # The frame batch in window order: windows never cross frames, so frames stay contiguous.
    frames, windows = layout.frames, layout.windows
    if gpu:
        frames.prepare(args.device), windows.prepare(args.device)

    tower = [Block(args.embed, args.heads, args.mlp, dtype, args.device) for _ in range(blocks)]
    x = torch.randn(tokens, args.embed, dtype=dtype, device=args.device)

    def run():
        h = x[order]  # window order, once
        for i, block in enumerate(tower):
            full = (i + 1) % args.full_every == 0
            h = block(h, frames if full else windows, cos, sin)
        return h[torch.from_numpy(layout.inverse).to(args.device)]

    with torch.no_grad():
        run()  # warm-up: cuDNN plans, cuBLASLt heuristics
        if gpu:
            torch.cuda.synchronize()
        start, reps = time.perf_counter(), 3
        for _ in range(reps):
            out = run()
        if gpu:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / reps
    print(f"{blocks} blocks, {args.images} images, {tokens} tokens ({windows.num_images} windows, "
          f"{frames.num_images} frames), {args.dtype} on {args.device}: {seconds * 1e3:.1f} ms, "
          f"{tokens / seconds:,.0f} tokens/s; output finite: {bool(torch.isfinite(out).all())}")


if __name__ == "__main__":
    main()
