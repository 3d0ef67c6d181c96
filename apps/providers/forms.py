from django import forms

from apps.projects.models import Project


class ProviderForm(forms.Form):
    name = forms.CharField(max_length=100)
    base_url = forms.CharField(max_length=500, label="Base URL", help_text="e.g. https://api.openai.com/v1")
    api_key = forms.CharField(max_length=500, required=False, label="API key",
                              widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
                              help_text="Stored encrypted and never shown again. Leave empty to keep the saved key.")
    models = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}), label="Models",
                             help_text="The model ids it serves, one per line (or fetch them from the provider).")
    enabled = forms.BooleanField(required=False, initial=True, label="Enabled")
    daily_token_budget = forms.IntegerField(min_value=1, max_value=10**12, required=False,
                                            label="Tokens per project per day", help_text="Empty: no budget.")
    daily_request_budget = forms.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                              label="Requests per project per day", help_text="Empty: no budget.")
    requests_per_minute = forms.IntegerField(min_value=1, max_value=1_000_000, required=False,
                                             label="Rate limit (requests per minute, all projects)",
                                             help_text="Empty: no limit.")
    timeout_s = forms.FloatField(min_value=1, max_value=3600, initial=60, label="Timeout (seconds)")
    max_retries = forms.IntegerField(min_value=0, max_value=5, initial=2, label="Retries")

    def service_values(self) -> dict:
        data = dict(self.cleaned_data)
        data["models"] = [line.strip() for line in data["models"].splitlines() if line.strip()]
        return data


class EnableForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.order_by("name"), label="Project")


class AllowedNetworkForm(forms.Form):
    network = forms.CharField(max_length=64, label="Address or range",
                              help_text="e.g. 10.0.0.5 or 10.0.0.0/24 (loopback, private and reserved ranges are "
                                        "refused unless listed here)")
    note = forms.CharField(max_length=200, required=False)
