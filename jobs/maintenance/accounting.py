"""Job accounting: fold the count and tally deltas, refresh the per-minute rollup.

Runs every ``CONVEYOR_ACCOUNTING_INTERVAL`` (default 5s) as the ``account_jobs`` runner.
Each worker's registry thread folds too (``jobs.worker_registry``), so the deltas stay few even
without beat; the counts are exact either way (``jobs.accounting.counts``). The rollup is
refreshed only here (``jobs.accounting.rollup``). Returns how many deltas were folded and
how many minute rows were written and expired.
"""

from dataclasses import dataclass

from jobs.accounting import counts, rollup, tallies


@dataclass(frozen=True)
class AccountResult:
    folded: int
    tallies_folded: int
    minute_rows: int
    minute_rows_expired: int


def account() -> AccountResult:
    """Fold pending count and tally deltas, then recompute the last few minutes of the rollup."""
    folded = counts.fold()
    tallied = tallies.fold()
    refreshed = rollup.refresh()
    return AccountResult(
        folded=folded.folded,
        tallies_folded=tallied,
        minute_rows=refreshed.rows,
        minute_rows_expired=refreshed.expired,
    )
