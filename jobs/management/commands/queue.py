from django.core.management.base import BaseCommand, CommandError

from jobs import queues


class Command(BaseCommand):
    help = (
        "List the declared queues, or pause or resume one: `queue list`, `queue pause NAME`, "
        "`queue resume NAME`. Once a pause returns no job of the queue starts anywhere."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser(
            "list", help="every declared queue: paused, limit, running, queued, dead letters"
        )
        for action in ("pause", "resume"):
            sub = actions.add_parser(action, help=f"{action} queue NAME")
            sub.add_argument("name")

    def handle(self, *args, **options):
        action = options["action"]
        if action == "list":
            for queue in queues.describe():
                self.stdout.write(_line(queue))
            return
        change = queues.pause if action == "pause" else queues.resume
        try:
            queue = change(options["name"], actor="command:queue")
        except queues.UnknownQueue as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(_line(queue))


def _line(queue: dict) -> str:
    limit = queue["concurrency_limit"]
    return (
        f"{queue['name']:<14} {'paused' if queue['paused'] else 'active':<7} "
        f"limit={limit if limit is not None else '-'} running={queue['running']} "
        f"queued={queue['queued']} dead_letters={queue['dead_letters']}"
    )
