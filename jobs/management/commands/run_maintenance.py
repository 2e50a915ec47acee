from django.core.management.base import BaseCommand, CommandError

from jobs.maintenance.runs import TASK_PREFIX

# The names the first version of this command accepted.
ALIASES = {
    "reap": "reap_jobs",
    "sweep": "sweep_jobs",
    "purge": "purge_jobs",
    "account": "account_jobs",
}


def runners() -> dict:
    """Return ``{runner: Celery task}`` for every ``maintenance.*`` task of every app."""
    from project.celery import app

    return {
        name.removeprefix(TASK_PREFIX): task
        for name, task in app.tasks.items()
        if name.startswith(TASK_PREFIX)
    }


class Command(BaseCommand):
    help = (
        "Run one maintenance pass now, in this process (what celery-beat runs periodically). "
        "It takes the runner's lock like a scheduled run, and is recorded like one."
    )

    def add_arguments(self, parser):
        parser.add_argument("runner", choices=sorted({*runners(), *ALIASES}))
        parser.add_argument(
            "--respect-interval",
            action="store_true",
            help="skip it, as beat would, if a run completed less than half an interval ago",
        )

    def handle(self, *args, runner, respect_interval, **options):
        name = ALIASES.get(runner, runner)
        outcome = runners()[name].run(force=not respect_interval)
        if not outcome["ran"]:
            self.stdout.write(f"{name}: skipped ({outcome['skipped']})")
            return
        if outcome["error"]:
            raise CommandError(f"{name} failed: {outcome['error']}")
        counts = ", ".join(f"{k}={v}" for k, v in outcome["counts"].items())
        self.stdout.write(f"{runner}: {counts} ({outcome['duration_ms']} ms)")
