#!/usr/bin/env python3
"""Stall samples of one kernel launch by source line: ncu's source page (a CSV of SASS
addresses, from device_run.sh's PROFILE_SOURCE) joined with the kernel's SASS and line info
(logs/sm90_lines.sass, `nvdisasm -g` of a -lineinfo build).

  python3 scripts/ncu_lines.py logs/source_clip-l336-uniform64.csv logs/sm90_lines.sass \
      [--top 40] [--ranges 400-560,561-600]

Prints the lines with the most samples (with their source text), and with --ranges the share
of samples and executed instructions in each range of lines of the kernel's file (an inlined
helper's instructions counted at the kernel line before them in the SASS)."""
import argparse
import collections
import csv
import re
import sys


def read_samples(path):
    """The profiled kernel's name and, per SASS offset, (samples, instructions executed)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    kernel = rows[0][1] if rows and rows[0] and rows[0][0] == "Kernel Name" else ""
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    names = rows[header]
    col_samples = names.index("Warp Stall Sampling (All Samples)")
    col_executed = names.index("Instructions Executed")
    body = [r for r in rows[header + 1:] if len(r) > col_executed and r[0].startswith("0x")]
    base = int(body[0][0], 16)
    samples = {}
    for r in body:
        samples[int(r[0], 16) - base] = (int(r[col_samples] or 0), int(r[col_executed] or 0))
    return kernel, samples


def mangled_args(kernel):
    """`<__nv_bfloat16, (int)64, (int)192>` -> the mangled template arguments' text."""
    m = re.search(r"<([^<>]*)>\(", kernel)
    parts = [p.strip() for p in m.group(1).split(",")]
    types = {"__nv_bfloat16": "13__nv_bfloat16", "__half": "6__half"}
    out = types[parts[0]]
    for p in parts[1:]:
        out += "Li" + p.replace("(int)", "") + "E"
    return out


def read_lines(path, function_key, own):
    """Offset -> (file, line) in the function whose mangled name contains function_key, and
    offset -> the last line of file `own` before it in the SASS (the caller of an inlined
    helper, approximately: nvdisasm gives no inline stack)."""
    where, caller, inside, current, last_own = {}, {}, False, None, None
    for text in open(path):
        if text.startswith(".text."):
            inside = function_key in text
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', text)
        if m:
            current = (m.group(1).rsplit("/", 1)[-1], int(m.group(2)))
            if current[0] == own:
                last_own = current
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/", text)
        if m and current:
            where[int(m.group(1), 16)] = current
            caller[int(m.group(1), 16)] = last_own or current
    return where, caller


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("sass")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--source", default="src/backends/cuda/flash_fwd_sm90.cu")
    parser.add_argument("--ranges", help="line ranges of the kernel's file, e.g. 400-560,561-600")
    args = parser.parse_args()
    kernel, samples = read_samples(args.csv)
    own = args.source.rsplit("/", 1)[-1]
    where, caller = read_lines(args.sass, mangled_args(kernel), own)
    if not where:
        sys.exit(f"no line info for {kernel} in {args.sass}")
    by_line, executed = collections.Counter(), collections.Counter()
    by_caller, executed_caller = collections.Counter(), collections.Counter()
    for offset, (n, e) in samples.items():
        key = where.get(offset, ("?", 0))
        by_line[key] += n
        executed[key] += e
        by_caller[caller.get(offset, key)] += n
        executed_caller[caller.get(offset, key)] += e
    total = sum(by_line.values())
    total_executed = sum(executed.values())
    try:
        source = open(args.source).read().splitlines()
    except OSError:
        source = []
    print(f"{kernel}\n{total} samples, {total_executed} warp instructions executed")
    for (name, line), n in by_line.most_common(args.top):
        text = source[line - 1].strip()[:70] if name == own and 0 < line <= len(source) else ""
        print(f"{100 * n / total:5.1f}% {100 * executed[(name, line)] / total_executed:5.1f}%i  {name}:{line}  {text}")
    if args.ranges:
        for r in args.ranges.split(","):
            lo, hi = map(int, r.split("-"))
            # helpers inlined there count as the line before them in the SASS
            n = sum(v for (name, line), v in by_caller.items() if name == own and lo <= line <= hi)
            e = sum(v for (name, line), v in executed_caller.items() if name == own and lo <= line <= hi)
            print(f"lines {lo}-{hi}: {100 * n / total:.1f}% of samples, {100 * e / total_executed:.1f}% of instructions")


if __name__ == "__main__":
    main()
