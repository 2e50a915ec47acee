from django.core.management.base import BaseCommand, CommandError

from jobs import limits, task_states


class Command(BaseCommand):
    help = (
        "List the limited or paused job tasks, or pause or resume one: `tasks list`, "
        "`tasks pause NAME`, `tasks resume NAME`. Once a pause returns no job of the task "
        "starts anywhere, in any queue."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("list", help="limited or paused tasks: paused, limit, running")
        for action in ("pause", "resume"):
            sub = actions.add_parser(action, help=f"{action} task NAME")
            sub.add_argument("name")

    def handle(self, *args, **options):
        action = options["action"]
        if action == "list":
            for task in task_states.describe(busiest_keys=True):
                self.stdout.write(_line(task))
            return
        change = task_states.pause if action == "pause" else task_states.resume
        try:
            task = change(options["name"], actor="command:tasks")
        except task_states.UnknownTask as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(_line(task))


def _line(task: dict) -> str:
    limit = limits.limit_of(task_states.registered().get(task["name"]))
    return (
        f"{task['name']:<30} {'paused' if task['paused'] else 'active':<7} "
        f"limit={limits.summary(limit)} running={task['running']}"
    )
