"""The mark a refused limited claim leaves on its queue's or task's state row (``held_at``):
a run's end rings for the held jobs only when it is set (jobs.limiter.wake)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0014_task_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="queuestate",
            name="held_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="taskstate",
            name="held_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
