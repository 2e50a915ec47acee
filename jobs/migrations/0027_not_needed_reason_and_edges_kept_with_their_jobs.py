"""A workflow's callback cancelled as not needed gets a reason of its own (``not_needed``),
so a workflow whose "on failure" callback was not needed is not counted failed; an edge is
no longer deleted with its workflow's row, only with its jobs (no search of the whole table
for edges a purged workflow cannot have). Neither changes the database.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0026_workflow_keys_without_constraints'),
    ]

    operations = [
        migrations.AlterField(
            model_name='job',
            name='reason',
            field=models.CharField(blank=True, choices=[('error', 'Error'), ('exhausted', 'Attempts exhausted'), ('permanent', 'Permanent error'), ('time_limit', 'Time limit'), ('worker_lost', 'Worker lost'), ('lease_expired', 'Lease expired'), ('worker_shutdown', 'Worker shutdown'), ('snoozed', 'Snoozed'), ('cancelled', 'Cancelled'), ('upstream', 'A dependency did not succeed'), ('not_needed', 'Not needed')], default='', max_length=20),
        ),
        migrations.AlterField(
            model_name='jobdependency',
            name='workflow',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='edges', to='jobs.workflow'),
        ),
    ]
