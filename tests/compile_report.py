"""Summarise a SPECJAX_COMPILE_REPORT file (tests/conftest.py) per test module: wall seconds,
XLA compile seconds, trace + lowering seconds, compilations; the slowest modules first.

    SPECJAX_COMPILE_REPORT=/tmp/compile.jsonl make test
    python tests/compile_report.py /tmp/compile.jsonl
"""

import collections
import json
import sys


def summarise(path: str) -> list[tuple[str, dict]]:
    per_module = collections.defaultdict(lambda: collections.Counter())
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            unit = row["test"] if "test_notebook_executes[" in row["test"] else row["test"].split("::")[0]
            per_module[unit].update({k: row[k] for k in ("seconds", "compile_s", "trace_s", "compiles")})
    return sorted(per_module.items(), key=lambda kv: -kv[1]["seconds"])


def main(path: str) -> None:
    rows = summarise(path)
    print(f"{'unit':<60}{'seconds':>9}{'compile':>9}{'trace':>8}{'programs':>9}")
    total = collections.Counter()
    for unit, c in rows:
        total.update(c)
        print(f"{unit:<60}{c['seconds']:9.1f}{c['compile_s']:9.1f}{c['trace_s']:8.1f}{c['compiles']:9d}")
    print(f"{'total':<60}{total['seconds']:9.1f}{total['compile_s']:9.1f}{total['trace_s']:8.1f}{total['compiles']:9d}")


if __name__ == "__main__":
    main(sys.argv[1])
