from django import forms
from django.contrib import admin

from agents.models import Agent


class AgentAdminForm(forms.ModelForm):
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
            "enabled",
            "visibility",
        ]

    def _post_clean(self):
        # Agent.clean() checks the config against the handler on the instance the form
        # fills in: with a field already refused (bad JSON) it would judge the old value.
        if self.errors:
            return
        super()._post_clean()


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentAdminForm
    list_display = ["slug", "tenant", "handler", "visibility", "enabled", "updated_at"]
    list_filter = ["tenant", "handler", "visibility", "enabled"]
    search_fields = ["slug", "name"]
