from django import forms


class DatasetForm(forms.Form):
    name = forms.CharField(max_length=120)
    description = forms.CharField(max_length=5000, required=False, widget=forms.Textarea(attrs={"rows": 3}))


class UploadForm(forms.Form):
    file = forms.FileField(help_text="JSONL, JSON array, CSV/TSV, Parquet, or a .gz/.zip of one of these.")


ROLE_CHOICES = [("", "keep as metadata"), ("id", "id"), ("prompt", "prompt"), ("response", "response"),
                ("messages", "messages (chat)"), ("label", "label"), ("reference", "reference"),
                ("split", "split (train, validation, test…)")]


class MappingForm(forms.Form):
    """One role select per column of the file, plus the import options."""

    message = forms.CharField(max_length=500, required=False, label="Version message")
    skip_bad_rows = forms.BooleanField(required=False, label="Skip malformed rows and report them")

    def __init__(self, *args, columns: list[str], suggested: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.columns = columns
        for index, column in enumerate(columns):
            self.fields[f"role_{index}"] = forms.ChoiceField(choices=ROLE_CHOICES, required=False, label=column,
                                                             initial=suggested.get(column, ""))

    def mapping(self) -> dict[str, str]:
        return {column: self.cleaned_data.get(f"role_{index}", "") for index, column in enumerate(self.columns)}

    def role_fields(self):
        return [self[f"role_{index}"] for index in range(len(self.columns))]


class SplitForm(forms.Form):
    train = forms.FloatField(min_value=0, max_value=1, initial=0.8)
    validation = forms.FloatField(min_value=0, max_value=1, initial=0.1, required=False)
    test = forms.FloatField(min_value=0, max_value=1, initial=0.1, required=False)
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0)
    stratify = forms.BooleanField(required=False, initial=True, label="Stratify by label")
