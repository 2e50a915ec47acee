"""The claim's pick and a queue's running count: partial indexes, built CONCURRENTLY."""

from django.db import migrations, models

from project.migration_operations import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('jobs', '0010_job_scale_indexes'),
    ]

    operations = [
        AddIndexOnline(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', ['queued', 'retrying'])), fields=['queue', 'task', '-priority', 'run_after', 'id'], name='job_runnable_idx'),
        ),
        AddIndexOnline(
            model_name='job',
            index=models.Index(condition=models.Q(('status', 'running')), fields=['queue'], name='job_running_idx'),
        ),
    ]
