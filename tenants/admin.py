from django.contrib import admin

from tenants.models import LIMIT_FIELDS, Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]
    # Quota and retention changes go through tenant_settings_update (audited): the console, the API
    # or `manage.py tenant update`. The admin shows them only.
    readonly_fields = LIMIT_FIELDS
