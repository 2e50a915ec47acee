"""Run every benchmark: ``python -m bench`` (``BENCH_QUICK=1`` for a short run)."""

import importlib
import sys

BENCHMARKS = ["bench.bench_jobs"]


def main() -> int:
    only = sys.argv[1:]
    for name in BENCHMARKS:
        if only and not any(o in name for o in only):
            continue
        importlib.import_module(name).main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
