from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"

    def ready(self):
        # Register the Celery tasks in every process: the embedded default runs
        # jobs by name on threads of its own, with no worker to discover them.
        from tasks_app import tasks  # noqa: F401
