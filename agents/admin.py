from django.contrib import admin

from agents.forms import AgentChecksAfterFields
from agents.models import Agent


class AgentAdminForm(AgentChecksAfterFields):
    class Meta:
        model = Agent
        fields = [
            "tenant",
            "slug",
            "name",
            "description",
            "version",
            "skills",
            "handler",
            "config",
            "turn_timeout",
            "enabled",
            "visibility",
        ]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentAdminForm
    list_display = ["slug", "tenant", "handler", "visibility", "enabled", "updated_at"]
    list_filter = ["tenant", "handler", "visibility", "enabled"]
    search_fields = ["slug", "name"]
