from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery


def count_configs(apps, schema_editor):
    """Each task with push configs gets their number (new tasks keep it as configs come and go)."""
    Task = apps.get_model("tasks_app", "Task")
    PushConfig = apps.get_model("tasks_app", "PushConfig")
    counts = (
        PushConfig.objects.filter(task_id=OuterRef("pk")).order_by().values("task_id").annotate(n=Count("pk"))
    )
    Task.objects.filter(pk__in=PushConfig.objects.values("task_id")).update(
        push_config_count=Subquery(counts.values("n")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tasks_app", "0016_open_tasks_spoken_to_are_tasks"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="push_config_count",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.RunPython(count_configs, migrations.RunPython.noop),
    ]
