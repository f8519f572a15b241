from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "a2a_platform.console"
    label = "console"
    verbose_name = "Operator console"

    def ready(self):
        # Open console feeds learn when someone leaves a tenant.
        from a2a_platform.console import signals  # noqa: F401
