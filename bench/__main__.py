"""Run every ``bench/bench_*.py``, each in its own process: ``python -m bench [NAME ...]``.

``BENCH_QUICK=1`` runs a short version of each. docs/benchmarks.md records measured numbers.
"""

import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    names = sorted(
        info.name
        for info in pkgutil.iter_modules([str(Path(__file__).parent)])
        if info.name.startswith("bench_")
    )
    chosen = [
        name for name in names if not argv or name in argv or name.removeprefix("bench_") in argv
    ]
    if not chosen:
        print(f"no benchmark called {' '.join(argv)}; known: {', '.join(n[6:] for n in names)}")
        return 2
    failed = 0
    for name in chosen:
        failed += subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=ROOT).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
