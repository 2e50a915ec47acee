"""Reproducible benchmarks: ``make bench`` (``BENCH_QUICK=1`` for a short run)."""
