"""Checks that a `visattn bench --json` file follows the schema in DESIGN.md."""
import json
import math
import sys

doc = json.load(open(sys.argv[1]))
expected_rows = int(sys.argv[2])
assert isinstance(doc["machine"], dict) and doc["machine"], "machine must be a non-empty object"
ceilings = doc["ceilings"]
assert ceilings["sgemm_gflops"] is None or ceilings["sgemm_gflops"] > 0, ceilings  # None: no OpenBLAS
assert "gemm_bf16_tflops" in ceilings, ceilings
rows = doc["results"]
assert len(rows) == expected_rows, f"{len(rows)} results, expected {expected_rows}"
for row in rows:
    for key in ("workload", "backend", "dtype", "heads", "head_dim", "images", "tokens", "ms",
                "tflops", "max_abs_err"):
        assert key in row, f"result lacks {key}: {row}"
    assert row["ms"] > 0 and math.isfinite(row["ms"]), row
    assert row["tflops"] > 0, row
    assert row["max_abs_err"] is None or row["max_abs_err"] < 2e-2, row
print(f"bench JSON ok: {len(rows)} results")
