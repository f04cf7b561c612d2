#!/usr/bin/env python3
"""Instruction counts of each kernel's innermost tensor-core loop, from a SASS dump.

    cuobjdump -sass OBJECT > k.sass && python3 scripts/sass_loops.py k.sass [--kernel REGEX]

For every kernel in the dump: the smallest backward-branch loop that holds HGMMA (wgmma)
instructions, or HMMA (mma.sync) in a kernel without HGMMA (the wgmma kernel's tail loop of
mma.syncs is not its main loop), its instruction count and its most frequent opcodes. A kernel
whose issue slots run out before its tensor cores are busy shows here as a long loop (bench/
NOTES.md CUDA entry 11: 809 instructions per 64 keys before, ~470 after). Also the cycles the
compiler's own stall counts (each instruction's control bits) hold a warp for, summed over the
loop body (every path, taken or not) and over the instructions right after a MUFU: a warp's
issue pacing before any wait on memory, barriers or the tensor cores (entry 16: each
exponential paced at 8 cycles). For a warp-specialized kernel (a USETMAXREG.DEALLOC splits off
its producer) also the producer's R2UR moves and BRA.U.ANY loops, which grow when ptxas keeps
its shared-memory addresses in per-thread registers (entry 25: 9 -> 33 R2UR, each TMA issue
behind them), and the whole kernel's local-memory (spill) instructions. Where the build
machine has no cuobjdump, the CUDA wheels carry one: `pip download nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm` and unzip them (cuobjdump runs nvdisasm from PATH).
"""
import argparse
import collections
import re
import sys

INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/")
HIGH_WORD = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/")
BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
MMA = ("HGMMA", "HMMA")


def kernels(lines):
    """(name, [(address, instruction text, stall cycles)]) for each function of the dump.
    Stall cycles: bits 105-108 of the 128-bit instruction (sm70 and newer), whose high 64 bits
    cuobjdump prints on the line after the instruction."""
    name, body = None, []
    for i, line in enumerate(lines):
        if "Function :" in line:
            if name:
                yield name, body
            name, body = line.split("Function :")[1].strip(), []
        elif name and (match := INSTRUCTION.match(line)):
            high = HIGH_WORD.match(lines[i + 1]) if i + 1 < len(lines) else None
            stall = (int(high.group(1), 16) >> 41) & 0xF if high else 0
            body.append((int(match.group(1), 16), match.group(2), stall))
    if name:
        yield name, body


def opcode(text):
    words = text.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def innermost_mma_loop(body):
    """The smallest [start, end] instruction range closed by a backward branch that holds an MMA
    (HGMMA where the kernel has any)."""
    kinds = ("HGMMA",) if any(opcode(t).startswith("HGMMA") for _, t, _ in body) else MMA
    index = {address: i for i, (address, _, _) in enumerate(body)}
    best = None
    for i, (address, text, _) in enumerate(body):
        branch = BRANCH.search(text)
        if not branch:
            continue
        target = int(branch.group(1), 16)
        if target >= address or target not in index:
            continue
        loop = body[index[target]:i + 1]
        if any(opcode(t).startswith(kinds) for _, t, _ in loop) and (best is None or len(loop) < len(best)):
            best = loop
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sass", help="cuobjdump -sass output")
    parser.add_argument("--kernel", default=".", help="regex on the (mangled) kernel names")
    parser.add_argument("--top", type=int, default=8, help="opcodes listed per loop")
    args = parser.parse_args()
    with open(args.sass) as f:
        lines = f.read().splitlines()
    found = False
    for name, body in kernels(lines):
        if not re.search(args.kernel, name):
            continue
        loop = innermost_mma_loop(body)
        if loop is None:
            continue
        found = True
        counts = collections.Counter(opcode(t) for _, t, _ in loop)
        mmas = sum(n for op, n in counts.items() if op.startswith(MMA))
        common = ", ".join(f"{op} {n}" for op, n in counts.most_common(args.top))
        stalls = sum(stall for _, _, stall in loop)
        after_mufu = sum(loop[k + 1][2] for k in range(len(loop) - 1) if opcode(loop[k][1]).startswith("MUFU"))
        print(f"{name}\n  loop: {len(loop)} instructions, {mmas} MMA ({common})\n"
              f"  stall counts (every path of the loop body): {stalls} cycles, {after_mufu} on the instructions after a MUFU")
        split = next((k for k, (_, t, _) in enumerate(body) if opcode(t).startswith("USETMAXREG.DEALLOC")), None)
        spills = sum(opcode(t).startswith(("LDL", "STL")) for _, t, _ in body)
        if split is not None:
            producer = [opcode(t) for _, t, _ in body[split:]]
            print(f"  producer: {len(producer)} instructions, {producer.count('R2UR')} R2UR, "
                  f"{sum(op.startswith('BRA.U.ANY') for op in producer)} BRA.U.ANY; local memory: {spills} LDL/STL")
    if not found:
        sys.exit(f"no kernel matching {args.kernel!r} has a loop with tensor-core instructions")


if __name__ == "__main__":
    main()
