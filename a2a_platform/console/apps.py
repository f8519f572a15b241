from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "a2a_platform.console"
    label = "console"
    verbose_name = "Operator console"
