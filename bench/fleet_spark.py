#!/usr/bin/env python3
"""docs/fleet.md's Spark SQL query, run for real on a local Spark over the bundled sample traces
exported to Parquet, and its answer checked against the answer the doc shows (which
tests/test_otlp_fleet.py proves equal to DuckDB's and to `schedscope why`'s own figures).

Spark is not a dependency of schedscope, nor of its tests: this runs from a venv of its own,
with Java 17 or newer on the PATH (Debian: openjdk-17-jre-headless). The exports are made by
the project's own `schedscope` (`--schedscope`), as a fleet's replicas would make them.

    python3 -m venv /tmp/sparkvenv && /tmp/sparkvenv/bin/pip install pyspark
    /tmp/sparkvenv/bin/python bench/fleet_spark.py --schedscope .venv/bin/schedscope
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "fleet.md"
BUCKET = "s3a://bucket/exports/"  # where the doc's query reads; a local directory here


def spark_query(doc: str) -> list[str]:
    """The doc's Spark SQL, as its statements."""
    section = doc.split("### Scaling out: Spark or Trino", 1)[1]
    sql = re.findall(r"```sql\n(.*?)```", section, re.S)[0]
    return [s.strip() for s in sql.split(";") if s.strip()]


def shown_answer(doc: str) -> list[tuple[str, str, int, float]]:
    """The rows of the DuckDB answer the doc shows."""
    table = re.findall(r"```text\n(┌.*?)```", doc, re.S)[0]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in table.splitlines() if line[0] == "│"]
    return [(e, r, int(n), float(s)) for e, r, n, s in cells[2:]]  # after the names and the types


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--schedscope",
        default=str(ROOT / ".venv" / "bin" / "schedscope"),
        help="the schedscope command that exports the traces (default: %(default)s)",
    )
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    doc = DOC.read_text()
    statements = spark_query(doc)
    with tempfile.TemporaryDirectory() as tmp:
        exports = Path(tmp) / "exports"
        traces = sorted((ROOT / "sample_traces").glob("*.jsonl"))
        for path in traces:
            out = exports / path.stem
            cmd = [
                args.schedscope,
                "export",
                str(path),
                "--format",
                "parquet",
                "--engine",
                path.stem,
                "-o",
                str(out),
            ]
            subprocess.run(cmd, check=True, capture_output=True)
        print(f"exported {len(traces)} traces to Parquet")
        began = time.perf_counter()
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("schedscope-fleet")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            result = None
            for statement in statements:
                result = spark.sql(statement.replace(BUCKET, exports.as_uri() + "/"))
            assert result is not None
            rows = [(r[0], r[1], int(r[2]), float(r[3])) for r in result.collect()]
            version = spark.version
        finally:
            spark.stop()
        took = time.perf_counter() - began
    print(f"Spark {version} (local[2]), {took:.1f} s from start to answer:")
    print(f"  {'engine':<24}{'reason':<21}{'waiting_request_steps':>22}{'waiting_seconds':>17}")
    for engine, reason, steps, seconds in rows:
        print(f"  {engine:<24}{reason:<21}{steps:>22}{seconds:>17.4f}")
    want = shown_answer(doc)
    if rows != want:
        print("DIFFERENT from the answer docs/fleet.md shows (DuckDB's):", file=sys.stderr)
        for got, shown in zip(rows, want, strict=False):
            if got != shown:
                print(f"  spark {got}  doc {shown}", file=sys.stderr)
        if len(rows) != len(want):
            print(f"  {len(rows)} rows against {len(want)}", file=sys.stderr)
        return 1
    print(f"equal to the answer docs/fleet.md shows: {len(rows)} rows, in the same order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
