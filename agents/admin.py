from django.contrib import admin

from agents.models import Agent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["slug", "tenant", "handler", "visibility", "enabled", "updated_at"]
    list_filter = ["tenant", "handler", "visibility", "enabled"]
    search_fields = ["slug", "name"]
