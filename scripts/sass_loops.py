#!/usr/bin/env python3
"""Instruction counts of each kernel's innermost tensor-core loop, from a SASS dump.

    cuobjdump -sass OBJECT > k.sass && python3 scripts/sass_loops.py k.sass [--kernel REGEX]

For every kernel in the dump: the smallest backward-branch loop that holds HGMMA (wgmma) or
HMMA (mma.sync) instructions, its instruction count and its most frequent opcodes. A kernel
whose issue slots run out before its tensor cores are busy shows here as a long loop (bench/
NOTES.md CUDA entry 11: 809 instructions per 64 keys before, ~470 after). Where the build
machine has no cuobjdump, the CUDA wheels carry one: `pip download nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm` and unzip them (cuobjdump runs nvdisasm from PATH).
"""
import argparse
import collections
import re
import sys

INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
MMA = ("HGMMA", "HMMA")


def kernels(lines):
    """(name, [(address, instruction text)]) for each function of the dump."""
    name, body = None, []
    for line in lines:
        if "Function :" in line:
            if name:
                yield name, body
            name, body = line.split("Function :")[1].strip(), []
        elif name and (match := INSTRUCTION.match(line)):
            body.append((int(match.group(1), 16), match.group(2)))
    if name:
        yield name, body


def opcode(text):
    words = text.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def innermost_mma_loop(body):
    """The smallest [start, end] instruction range closed by a backward branch that holds an MMA."""
    index = {address: i for i, (address, _) in enumerate(body)}
    best = None
    for i, (address, text) in enumerate(body):
        branch = BRANCH.search(text)
        if not branch:
            continue
        target = int(branch.group(1), 16)
        if target >= address or target not in index:
            continue
        loop = body[index[target]:i + 1]
        if any(opcode(t).startswith(MMA) for _, t in loop) and (best is None or len(loop) < len(best)):
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
        counts = collections.Counter(opcode(t) for _, t in loop)
        mmas = sum(n for op, n in counts.items() if op.startswith(MMA))
        common = ", ".join(f"{op} {n}" for op, n in counts.most_common(args.top))
        print(f"{name}\n  loop: {len(loop)} instructions, {mmas} MMA ({common})")
    if not found:
        sys.exit(f"no kernel matching {args.kernel!r} has a loop with tensor-core instructions")


if __name__ == "__main__":
    main()
