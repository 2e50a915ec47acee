"""Run every benchmark, each in its own process: ``python -m bench [NAME ...]``.

``BENCH_QUICK=1`` runs a short version of each. Results are printed and written to
``bench/results/<name>.json``; docs/benchmarks.md records measured numbers.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = {
    "jobs": ["-m", "bench.bench_jobs"],
    "deployments": ["bench/bench_deployments.py"],
}


def main() -> int:
    only = sys.argv[1:]
    unknown = set(only) - set(BENCHMARKS)
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}; known: {', '.join(BENCHMARKS)}")
        return 2
    failed = 0
    for name, args in BENCHMARKS.items():
        if only and name not in only:
            continue
        failed += subprocess.run([sys.executable, *args], cwd=ROOT).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
