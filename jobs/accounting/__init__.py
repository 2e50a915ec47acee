"""The job engine's own accounting: exact live counts and a per-minute rollup of ended jobs."""
