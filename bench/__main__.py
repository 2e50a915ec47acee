"""Run every ``bench/bench_*.py`` module's ``main()`` in turn (``python -m bench [names]``)."""

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    names = sorted(
        info.name
        for info in pkgutil.iter_modules([str(Path(__file__).parent)])
        if info.name.startswith("bench_")
    )
    chosen = [name for name in names if not argv or name in argv or name[6:] in argv]
    for name in chosen:
        importlib.import_module(f"bench.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
