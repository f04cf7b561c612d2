"""GPU bench: the `cuda` and `cudnn` backends beside the torch paths a user would pick instead,
timed in one process on the same tensors, bf16, writing bench JSON in the schema of `visattn bench`:

    python3 bench/gpu_bench.py [--workloads FILE] [--json FILE] [--only NAME,...] [--backends cuda,cudnn,...]

visattn backends: `cuda` (our kernel) and `cudnn` (cuDNN's ragged SDPA, one call per batch; its
plan is built by the first, untimed call), on prepared batches; `cuda-eager` and `cudnn-eager`:
each on a batch that was not prepared (both upload its metadata in the call; cudnn runs a
uniform one on dense plans, docs/cudnn.md); `auto-eager`: backend "auto" on a batch that was
not prepared (what a plain call gets: cuda or cudnn by the measured crossovers). A backend this
machine lacks is reported and skipped.

Peers (backend `peer:<name>`): torch SDPA per image with the flash, cuDNN and efficient
kernels; nested jagged SDPA; torch varlen_attn (FlashAttention 2 inside PyTorch); padded SDPA
with a key mask (or without, for equal lengths) when the padded batch fits. FLOPs =
4 * sum(s^2) * heads * head_dim; time = median of triton.testing.do_bench (L2 flushed between
runs), the backends timed in turn over --rounds rounds (default 3) and the median round kept.
max_abs_err is measured against an fp32 reference on the first 256 query rows of the first and
last image.
"""

import argparse
import json
import platform
import statistics
import sys

import torch
import torch.nn.functional as F
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel

import visattn


def median_ms(fn, rep=60):
    return tt.do_bench(fn, warmup=10, rep=rep, return_mode="median")


def copy_tbps():
    """Device memory bandwidth: read + write of a 2 GiB copy."""
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / median_ms(lambda: y.copy_(x)) / 1e9


def gemm_bf16_tflops():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    return 2 * 8192**3 / median_ms(lambda: a @ b) / 1e9


class Workload:
    def __init__(self, spec, dtype=torch.bfloat16):
        self.name, self.heads, self.head_dim = spec["name"], spec["heads"], spec["head_dim"]
        self.kv_heads = spec.get("kv_heads", self.heads)
        self.lengths = spec["seqlens"]
        self.cu = [0]
        for n in self.lengths:
            self.cu.append(self.cu[-1] + n)
        gen = torch.Generator(device="cuda").manual_seed(0)
        shape = (self.cu[-1], self.heads, self.head_dim)
        self.q = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        self.k = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        self.v = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        self.cu_tensor = torch.tensor(self.cu, device="cuda", dtype=torch.int32)
        self.flops = 4.0 * sum(n * n for n in self.lengths) * self.heads * self.head_dim

    def image(self, tensor, i):
        """Image i of a [tokens, heads, dim] tensor as [1, heads, n, dim]."""
        return tensor[self.cu[i]:self.cu[i + 1]].transpose(0, 1)[None]

    def checked_rows(self):
        """(image, first token, rows) compared with the fp32 reference."""
        picks = sorted({0, len(self.lengths) - 1})
        return [(i, self.cu[i], min(256, self.lengths[i])) for i in picks if self.lengths[i] > 0]

    def reference(self, i, rows):
        q, k, v = (self.image(x, i).float() for x in (self.q, self.k, self.v))
        return F.scaled_dot_product_attention(q[:, :, :rows], k, v)[0].transpose(0, 1)


# Each peer: (name, make) where make(w) returns (timed call, call giving [tokens, heads, dim]
# rows of image i) or raises when the path cannot run this workload.
def visattn_backend(name, prepared=True):
    """prepared: the batch's metadata on the GPU once (what a captured graph needs); else a
    plain batch per call (cudnn: uniform batches then run on dense plans)."""
    def make(w):
        batch = visattn.VarlenBatch(w.cu)
        if prepared:
            batch.prepare("cuda")
        call = lambda: visattn.attention(w.q, w.k, w.v, batch=batch, backend=name)  # noqa: E731
        return call, whole_output(call, w)  # the first call (cudnn: builds the plan) is untimed

    return make


def whole_output(call, w):
    out = call()
    return lambda i: out[w.cu[i]:w.cu[i + 1]]


def per_image(kernel):
    def make(w):
        def image_out(i):
            with sdpa_kernel([kernel]):
                return F.scaled_dot_product_attention(w.image(w.q, i), w.image(w.k, i), w.image(w.v, i))[0].transpose(0, 1)

        def call():
            with sdpa_kernel([kernel]):
                for i in range(len(w.lengths)):
                    F.scaled_dot_product_attention(w.image(w.q, i), w.image(w.k, i), w.image(w.v, i))

        image_out(0)  # raises here when the kernel cannot run the shape
        return call, image_out

    return make


def nested_jagged(w):
    offsets = w.cu_tensor.long()
    q, k, v = (torch.nested.nested_tensor_from_jagged(x, offsets=offsets).transpose(1, 2) for x in (w.q, w.k, w.v))
    call = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    return call, whole_output(lambda: call().transpose(1, 2).values(), w)


def varlen_attn(w):
    from torch.nn.attention.varlen import varlen_attn as kernel

    n = max(w.lengths)
    call = lambda: kernel(w.q, w.k, w.v, w.cu_tensor, w.cu_tensor, n, n)  # noqa: E731
    return call, whole_output(call, w)


def padded(w):
    n, b = max(w.lengths), len(w.lengths)
    if b * w.heads * n * n > 6e9 or b * w.heads * n * w.head_dim * 2 * 3 > 40e9:
        raise RuntimeError(f"padded batch [{b}, {w.heads}, {n}, {n}] too large")
    qp, kp, vp = (torch.zeros(b, w.heads, n, w.head_dim, device="cuda", dtype=w.q.dtype) for _ in range(3))
    for i in range(b):
        for dst, src in ((qp, w.q), (kp, w.k), (vp, w.v)):
            dst[i, :, : w.lengths[i]] = w.image(src, i)[0]
    lengths = torch.tensor(w.lengths, device="cuda")
    mask = None if len(set(w.lengths)) == 1 else (torch.arange(n, device="cuda")[None] < lengths[:, None])[:, None, None]
    call = lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask)  # noqa: E731
    out = call()
    return call, lambda i: out[i, :, : w.lengths[i]].transpose(0, 1)


BACKENDS = [
    ("cuda", visattn_backend("cuda")),
    ("cudnn", visattn_backend("cudnn")),
    ("cuda-eager", visattn_backend("cuda", prepared=False)),
    ("cudnn-eager", visattn_backend("cudnn", prepared=False)),
    ("auto-eager", visattn_backend("auto", prepared=False)),
    ("peer:sdpa-flash-loop", per_image(SDPBackend.FLASH_ATTENTION)),
    ("peer:sdpa-cudnn-loop", per_image(SDPBackend.CUDNN_ATTENTION)),
    ("peer:sdpa-efficient-loop", per_image(SDPBackend.EFFICIENT_ATTENTION)),
    ("peer:sdpa-nested-jagged", nested_jagged),
    ("peer:varlen_attn", varlen_attn),
    ("peer:sdpa-padded", padded),
]


def report_failure(name, w, error):
    print(f"  {name} on {w.name}: {type(error).__name__}: {str(error).splitlines()[0][:100]}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="../shared/workloads.json")
    parser.add_argument("--json", help="write bench JSON here")
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--backends", help="comma-separated backend names, timed in this order (default: all)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="time the backends in turn this many times over (drift falls on all alike)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    specs = json.load(open(args.workloads))["workloads"]
    if args.only:
        specs = [s for s in specs if s["name"] in args.only.split(",")]
    backends = BACKENDS
    if args.backends:  # in the order given: a backend's place in each round can be varied
        by_name = dict(BACKENDS)
        names = args.backends.split(",")
        unknown = [name for name in names if name not in by_name]
        if unknown:
            parser.error(f"--backends: unknown {', '.join(unknown)}; known: {', '.join(by_name)}")
        if len(set(names)) < len(names):
            parser.error(f"--backends: a backend is named twice in {args.backends}")
        backends = [(name, by_name[name]) for name in names]

    torch.manual_seed(0)
    gemm, bandwidth = gemm_bf16_tflops(), copy_tbps()
    machine = {"gpu": torch.cuda.get_device_name(), "host": platform.node(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "visattn": visattn.__version__,
               "visattn_cudnn": next((b["detail"] or b["unavailable_reason"] for b in visattn.backends()
                                      if b["name"] == "cudnn"), "not built in")}
    print(f"# {machine}\n# ceilings (same run): bf16 GEMM {gemm:.0f} TFLOP/s (8192^3), copy {bandwidth:.2f} TB/s",
          flush=True)
    print(f"{'workload':26}" + "".join(f"{name.removeprefix('peer:')[:16]:>17}" for name, _ in backends))
    results = []
    for spec in specs:
        w = Workload(spec)
        references = [(i, t0, rows, w.reference(i, rows)) for i, t0, rows in w.checked_rows()]
        line = f"{w.name:26}"
        # Each backend's call is made and checked first; then the backends are timed in turn,
        # `rounds` times over (the same 60 ms each in all), so that a clock or thermal drift
        # during the run falls on every backend alike. ms: the median of the rounds' medians.
        timed = {}  # backend name: (call, max_abs_err, one median per round)
        for name, make in backends:
            try:
                call, image_out = make(w)
                err = max((image_out(i)[:rows].float() - ref).abs().max().item() for i, _, rows, ref in references)
            except Exception as error:  # noqa: BLE001 - a peer that cannot run this shape is reported, not fatal
                report_failure(name, w, error)
                continue
            timed[name] = (call, err, [])
        for _ in range(args.rounds):
            for name, (call, _, rounds) in list(timed.items()):
                try:
                    rounds.append(median_ms(call, rep=60 / args.rounds))
                except Exception as error:  # noqa: BLE001 - e.g. out of memory while timing
                    report_failure(name, w, error)
                    del timed[name]
        for name, _ in backends:
            if name not in timed:
                line += f"{'-':>17}"
                continue
            _, err, rounds = timed[name]
            ms = statistics.median(rounds)
            tflops = w.flops / ms / 1e9
            spread = 50 * (max(rounds) - min(rounds)) / ms  # half the range, in percent
            results.append({"workload": w.name, "backend": name, "dtype": "bf16", "heads": w.heads,
                            "head_dim": w.head_dim, "images": len(w.lengths), "tokens": w.cu[-1], "ms": ms,
                            "ms_rounds": rounds, "tflops": tflops, "max_abs_err": err})
            line += f"{tflops:11.1f}±{spread:4.1f}%"
        print(line, flush=True)
        del w, timed
        torch.cuda.empty_cache()
    print(f"(TFLOP/s: median of {args.rounds} interleaved rounds, ± half their range)")
    plans = [b["plans_built"] for b in visattn.backends() if b["name"] == "cudnn"]
    if plans:
        print(f"# visattn cudnn: {plans[0]} cuDNN plans built in this run")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "ceilings": {"gemm_bf16_tflops": gemm, "copy_tbps": bandwidth}, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
