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
