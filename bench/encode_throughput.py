"""Site-side encoding: throughput and peak memory for a 10 M-row table (issue 2 targets:
≥ 2 M rows/s, peak RSS ≤ 500 MB).

Builds a 10 M-row Parquet table shaped like paper-synthetic (10 numeric features + label +
sensitive), trains and signs a small encoder, then times the real `infoshape encode` command in a
child process and reads the child's peak RSS. Writes bench/results/encode_throughput.json.

    .venv/bin/python bench/encode_throughput.py [--rows 10000000] [--workdir /tmp/infoshape-bench]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine_info, write_result  # noqa: E402
from shared.bundle import generate_keypair, load_private_key  # noqa: E402
from shared.data import load_dataset  # noqa: E402
from shared.pipeline import bundle_from_fitted, fit_shaper  # noqa: E402


def make_table(path: Path, rows: int, seed: int) -> None:
    """Write `rows` rows in 1 M-row batches (bounded memory) with paper-synthetic's columns."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([(f"x{i}", pa.float64()) for i in range(10)]
                       + [("y", pa.int64()), ("s", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        done = 0
        while done < rows:
            n = min(1_000_000, rows - done)
            cols = {f"x{i}": rng.standard_normal(n) for i in range(10)}
            cols["y"] = rng.integers(0, 2, n)
            cols["s"] = rng.integers(0, 2, n)
            writer.write_table(pa.table(cols, schema=schema))
            done += n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/infoshape-bench"))
    args = parser.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    table = work / "site.parquet"
    t0 = time.perf_counter()
    make_table(table, args.rows, seed=0)
    make_seconds = time.perf_counter() - t0

    keys = generate_keypair(work / "keys")
    data = load_dataset("paper-synthetic", seed=0)
    fitted = fit_shaper(data.frame.iloc[:3000], data.spec, max_steps=50, warmup_steps=50)
    bundle_from_fitted(fitted).save(work / "bundle", load_private_key(keys.private))

    exe = Path(sys.executable).with_name("infoshape")
    cmd = [str(exe), "encode", "--bundle", str(work / "bundle"), "--trusted-key",
           str(keys.public), "--data", str(table), "--out", str(work / "out.parquet"),
           "--json", "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"encode failed: {proc.stderr.strip()}")
    reported = json.loads(proc.stdout)
    out_rows = pq.ParquetFile(work / "out.parquet").metadata.num_rows
    result = {
        "machine": machine_info(),
        "rows": args.rows,
        "input": "parquet, 10 float64 features + int label + int sensitive",
        "table_build_seconds": make_seconds,
        "command": " ".join(cmd),
        "process_wall_seconds": wall,
        "process_rows_per_second": args.rows / wall,
        "encode_reported": reported,
        "child_peak_rss_mb": usage.ru_maxrss / 1024,
        "child_cpu_seconds": usage.ru_utime + usage.ru_stime,
        "output_rows": out_rows,
        "targets": {"rows_per_second": 2_000_000, "peak_rss_mb": 500},
    }
    path = write_result("encode_throughput", result)
    print(json.dumps({k: result[k] for k in ("process_wall_seconds", "process_rows_per_second",
                                              "child_peak_rss_mb", "child_cpu_seconds")}))
    print(f"wrote {path}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
