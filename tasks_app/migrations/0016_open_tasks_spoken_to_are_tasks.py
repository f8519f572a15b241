from django.db import migrations


def reveal_spoken(apps, schema_editor):
    """A task left open (Reply.OPEN) after its agent's first word, or a cancel, is a task its caller was shown."""
    Task = apps.get_model("tasks_app", "Task")
    Task.objects.filter(reply="open", event_seq__gt=1).update(reply="task")


class Migration(migrations.Migration):
    dependencies = [
        ("tasks_app", "0015_idempotency_key_seq_before"),
    ]

    operations = [migrations.RunPython(reveal_spoken, migrations.RunPython.noop)]
