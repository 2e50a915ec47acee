from django.core.management.base import BaseCommand

from jobs.maintenance.purge import purge
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep

SERVICES = {"reap": reap, "sweep": sweep, "purge": purge}


class Command(BaseCommand):
    help = "Run one job-engine maintenance pass now (what celery-beat runs periodically)."

    def add_arguments(self, parser):
        parser.add_argument("service", choices=sorted(SERVICES))

    def handle(self, *args, service, **options):
        result = SERVICES[service]()
        self.stdout.write(f"{service}: " + ", ".join(f"{k}={v}" for k, v in vars(result).items()))
