"""The create form. Checks beyond shape are the service's (the same for the API); its errors
name `models`, `prompts`, `dataset_version`, `max_new_tokens` ..., shown on the field of that name."""

from django import forms

SLOTS = 4


class CreateForm(forms.Form):
    name = forms.CharField(max_length=120)
    model_1 = forms.TypedChoiceField(coerce=int, label="Model 1")
    model_2 = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="Model 2")
    model_3 = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="Model 3")
    model_4 = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="Model 4")
    provider_models = forms.TypedMultipleChoiceField(
        coerce=int, required=False, widget=forms.CheckboxSelectMultiple, label="Provider models",
        help_text="Models of outside providers enabled for this project, as more columns (2 to 4 columns in all).")
    prompts = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}), required=False,
                              help_text="One prompt per line. Or leave empty and sample a dataset version below.")
    dataset_version = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                             label="Or sample a dataset version")
    split = forms.CharField(max_length=16, required=False, help_text="Empty: every row.")
    sample_size = forms.IntegerField(required=False, min_value=1, label="Rows to sample", initial=20)
    seed = forms.IntegerField(required=False, initial=0, label="Sampling seed")
    max_new_tokens = forms.IntegerField(initial=128, label="Max new tokens")
    temperature = forms.FloatField(initial=0.0, help_text="0 is greedy decoding.")
    generation_seed = forms.IntegerField(required=False, label="Generation seed")

    FIELD_FOR = {"models": "model_1", "references": "prompts", "params.max_new_tokens": "max_new_tokens",
                 "params.temperature": "temperature", "params.seed": "generation_seed"}

    def __init__(self, *args, models=(), versions=(), provider_models=(), **kwargs):
        super().__init__(*args, **kwargs)
        choices = [(m.pk, f"{m.name} (adapter of {m.base_model.name})" if m.base_model_id else m.name)
                   for m in models]
        for i in range(1, SLOTS + 1):
            self.fields[f"model_{i}"].choices = [("", "—")] + choices
        if provider_models:
            self.fields["provider_models"].choices = [(m.pk, str(m)) for m in provider_models]
        else:  # none enabled here, or this person may not use them
            del self.fields["provider_models"]
        self.fields["dataset_version"].choices = [("", "— typed prompts —")] + [(v.pk, str(v)) for v in versions]

    def field_for(self, name: str | None) -> str | None:
        """The form field showing a service error about `name` (None: shown above the form)."""
        name = self.FIELD_FOR.get(name, name)
        return name if name in self.fields else None

    def create_arguments(self) -> dict:
        data = self.cleaned_data
        params = {"max_new_tokens": data["max_new_tokens"], "temperature": data["temperature"]}
        if data.get("generation_seed") is not None:
            params["seed"] = data["generation_seed"]
        arguments = {"name": data["name"], "params": params,
                     "models": [data[f"model_{i}"] for i in range(1, SLOTS + 1) if data.get(f"model_{i}") is not None],
                     "provider_models": data.get("provider_models") or []}
        if data.get("dataset_version"):
            arguments.update(dataset_version=data["dataset_version"], split=data.get("split") or "",
                             sample_size=data.get("sample_size"), seed=data.get("seed") or 0)
        else:
            arguments["prompts"] = [line.strip() for line in (data.get("prompts") or "").splitlines() if line.strip()]
        return arguments
