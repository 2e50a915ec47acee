from django.core.management.base import BaseCommand, CommandError

from deployments.projects_as_code import InvalidDocument, apply, load, parse


class Command(BaseCommand):
    help = (
        "Create or update projects and pipelines from a YAML or JSON file, idempotently. "
        "A file with any error is rejected as a whole. Schema: docs/deployments.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="projects file (.yaml, .yml or .json)")
        parser.add_argument(
            "--prune", action="store_true", help="delete pipelines the file does not list"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="validate and report, change nothing"
        )

    def handle(self, *args, **options):
        try:
            specs = parse(load(options["file"]))
        except InvalidDocument as exc:
            details = "\n".join(f"  {error}" for error in exc.errors)
            raise CommandError(f"{options['file']} was not applied:\n{details}") from None
        result = apply(specs, prune=options["prune"], dry_run=options["dry_run"])
        for line in result.lines:
            self.stdout.write(line)
        prefix = "dry run, nothing written: " if options["dry_run"] else ""
        self.stdout.write(
            f"{prefix}{result.created} created, {result.updated} updated, "
            f"{result.unchanged} unchanged, {result.deleted} deleted"
        )
