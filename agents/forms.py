from django import forms


class AgentChecksAfterFields(forms.ModelForm):
    """Run the model's own checks only once every field is valid.

    Agent.clean() checks the config against the handler on the instance the form
    fills in: with a field already refused (bad JSON, say) it would judge a default
    or the old value instead of what was typed, and add a second, confusing error.
    """

    def _post_clean(self):
        if self.errors:
            return
        super()._post_clean()
