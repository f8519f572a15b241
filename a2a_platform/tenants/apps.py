from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "a2a_platform.tenants"
    label = "tenants"
    verbose_name = "Tenants"

    def ready(self):
        # Open console feeds learn when someone leaves a tenant.
        from a2a_platform.tenants import signals  # noqa: F401
