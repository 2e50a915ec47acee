import json

from django.core.management.base import BaseCommand

from jobs.selectors import queue_stats


class Command(BaseCommand):
    help = "Print job counts by status, queue and task, and the age of the oldest queued job."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the full statistics as JSON")

    def handle(self, *args, **options):
        stats = queue_stats()
        if options["json"]:
            self.stdout.write(json.dumps(stats, default=str, indent=2))
            return
        self.stdout.write(
            "status     " + "  ".join(f"{k}={v}" for k, v in stats["by_status"].items())
        )
        for queue, counts in sorted(stats["by_queue"].items()):
            self.stdout.write(
                f"queue {queue:<12} " + "  ".join(f"{k}={v}" for k, v in counts.items() if v)
            )
        age = stats["oldest_queued_age_seconds"]
        self.stdout.write(f"oldest queued job: {'none' if age is None else f'{age:.1f}s'}")
        for runner in stats["maintenance"]:
            self.stdout.write(f"maintenance {runner['runner']:<22} {_describe(runner)}")


def _describe(runner: dict) -> str:
    """One line: last completed run, its counts or error, and a flag when overdue."""
    if not runner["enabled"]:
        state = "disabled"
    elif runner["last_run_at"] is None:
        state = "never ran"
    else:
        state = f"last run {runner['last_run_at']:%Y-%m-%d %H:%M:%S} ({runner['duration_ms']} ms)"
        if runner["error"]:
            state += f" FAILED: {runner['error'][:120]}"
        else:
            state += " " + " ".join(f"{k}={v}" for k, v in (runner["counts"] or {}).items())
    if runner["overdue"]:
        state += "  OVERDUE: no run within 3 intervals (beat not running?)"
    return state
