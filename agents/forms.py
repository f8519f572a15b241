from django import forms


class AgentChecksAfterFields(forms.ModelForm):
    """Run the model's own checks only once every field is valid.

    Agent.clean() checks the config against the handler on the instance the form
    fills in: with a field already refused (bad JSON, say) it would judge a default
    or the old value instead of what was typed, and add a second, confusing error.

    The turn time limit may be left empty: the agent keeps the limit it has
    (600 s for a new one).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "turn_timeout" in self.fields:
            self.fields["turn_timeout"].required = False

    def clean_turn_timeout(self):
        value = self.cleaned_data.get("turn_timeout")
        return value if value is not None else self.instance.turn_timeout

    def _post_clean(self):
        if self.errors:
            return
        super()._post_clean()
