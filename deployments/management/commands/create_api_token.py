from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from deployments.models import Project
from project.access.models import TokenScope
from project.access.tokens import token_create
from project.env import parse_duration


class Command(BaseCommand):
    help = "Create an API token and print it once, alone on the last line."

    def refuse(self, message: str) -> CommandError:
        return CommandError(message, returncode=2)

    def add_arguments(self, parser):
        parser.add_argument(
            "--project",
            action="append",
            default=[],
            metavar="SLUG",
            help="a project the token may use (repeat for several; not with admin, which "
            "sees every project)",
        )
        parser.add_argument(
            "--scope",
            choices=TokenScope.values,
            default=None,
            help="default: deploy with --project, admin without",
        )
        parser.add_argument(
            "--name", default="", help="what the token is for (default: scope and projects)"
        )
        parser.add_argument(
            "--user",
            default="",
            metavar="USERNAME",
            help="the active user the token acts for (needed to approve deployments)",
        )
        parser.add_argument(
            "--expires-in", default="", metavar="DURATION", help="e.g. 90d; default: never"
        )

    @transaction.atomic
    def handle(self, *args, project, scope, name, user, expires_in, **options):
        scope = scope or (TokenScope.DEPLOY if project else TokenScope.ADMIN)
        if scope == TokenScope.ADMIN and project:
            # An admin token reaches every project: binding it to some would be a lie.
            raise self.refuse(
                "an admin token sees every project and cannot be bound to --project; "
                "use --scope deploy or read for a bound token, or drop --project"
            )
        person = None
        if user:
            person = get_user_model().objects.filter(username=user).first()
            if person is None or not person.is_active:
                state = "does not exist" if person is None else "is not active"
                raise self.refuse(f"--user: user {user!r} {state}")
        projects = list(Project.objects.filter(slug__in=project))
        missing = sorted(set(project) - {p.slug for p in projects})
        if missing:
            raise CommandError(f"no such project: {', '.join(missing)}")
        if scope != TokenScope.ADMIN and not projects:
            raise CommandError(f"a {scope} token needs at least one --project")
        expires_at = None
        if expires_in:
            try:
                expires_at = timezone.now() + parse_duration(expires_in)
            except ValueError as exc:
                raise CommandError(f"--expires-in: {exc}") from None
            if expires_at <= timezone.now() + timedelta(seconds=1):
                raise CommandError("--expires-in must be positive")
        token, raw = token_create(
            name=name or f"{scope}:{','.join(project) or 'all'}",
            scope=scope,
            expires_at=expires_at,
            created_by="manage.py create_api_token",
            user=person,
        )
        for found in projects:
            found.api_tokens.add(token)
        self.stdout.write(
            f"Created {scope} token {token.prefix}… ({token.name}) for "
            f"{', '.join(project) or 'every project'}"
            f"{f', acting for {person.get_username()}' if person else ''}; "
            "it is not shown again:"
        )
        self.stdout.write(raw)
