from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "a2a_platform.tenants"
    label = "tenants"
    verbose_name = "Tenants"
