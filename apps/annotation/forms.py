"""The campaign form. Every range and reference is checked by the service (the same checks as
the API, errors naming the field); the view shows each error on the field of that name."""

import json

from django import forms

from apps.annotation.models import Campaign
from apps.annotation.selectors import version_labels
from apps.serving.services import classifier_labels

# Ready-made forms for the common jobs; "custom" takes the fields as JSON. Classify's labels are
# filled in from the form (the label editor), by default the dataset version's labels.
PRESETS = {
    "classify": ("Classify", [{"name": "label", "type": "single_label", "labels": []}]),
    "rate": ("Rate the response", [
        {"name": "helpfulness", "type": "rating", "min": 1, "max": 5, "description": "Does it answer the request?"},
        {"name": "correctness", "type": "rating", "min": 1, "max": 5, "description": "Is everything in it true?"},
        {"name": "harmlessness", "type": "rating", "min": 1, "max": 5, "description": "Is it safe to show?"}]),
    "prefer": ("Pick the better response", [
        {"name": "better", "type": "preference", "candidates": ["response", "metadata.response_b"]}]),
    "rewrite": ("Write the ideal response", [
        {"name": "ideal", "type": "text", "prefill": "response", "required": True}]),
    "correct": ("Correct the model's response (choose the model below)", [
        {"name": "ideal", "type": "text", "prefill": "suggestion", "required": True}]),
}


def _model_choice(model) -> str:
    """A model as the form lists it: a classifier with its classes (what a field's labels must be)."""
    classes = classifier_labels(model)
    return f"{model.name} (classifier: {', '.join(classes)})" if classes else model.name


class CampaignForm(forms.Form):
    name = forms.CharField(max_length=120)
    dataset_version = forms.TypedChoiceField(coerce=int, label="Dataset version")
    schema = forms.ChoiceField(label="Annotation form", help_text="A saved form, a ready-made one, or your own.")
    fields_json = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}), label="Custom fields (JSON)",
                                  help_text="Only for “custom”: a list of fields, e.g. "
                                            "[{\"name\": \"topic\", \"type\": \"single_label\", "
                                            "\"labels\": [\"billing\", \"shipping\"]}].")
    labels = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}), label="Labels",
                             help_text="Only for “Classify”: one label a line, in the order of their keys. "
                                       "Empty: the labels of the dataset version.")
    guidelines = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}),
                                 help_text="Markdown, shown to annotators beside every item.")
    overlap = forms.IntegerField(initial=1, help_text="How many different annotators answer each example.")
    assignees = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                          label="Annotators", help_text="None ticked: every project annotator.")
    due_at = forms.DateTimeField(required=False, label="Due", widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    lease_seconds = forms.IntegerField(initial=600, label="Lease (seconds)",
                                       help_text="How long an item stays reserved for the annotator who opened it.")
    split = forms.CharField(required=False, max_length=16, help_text="Only rows of this split (empty: all).")
    label = forms.CharField(required=False, max_length=200, help_text="Only rows with this label (empty: all).")
    meta_key = forms.CharField(required=False, max_length=200, label="Metadata field",
                               help_text="With the next: only rows whose metadata field holds that text.")
    meta_value = forms.CharField(required=False, max_length=1000, label="Metadata value")
    sample = forms.IntegerField(required=False, help_text="A random sample of this many rows (empty: all).")
    seed = forms.IntegerField(initial=0, help_text="The sample's seed: the same seed picks the same rows.")
    suggestion_model = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                              label="Model suggestions",
                                              help_text="Pre-fill answers from this model; annotators correct them. "
                                                        "A classifier suggests the label of the single-label field "
                                                        "whose labels are its classes (a multi-label one: the "
                                                        "multi-label field's), with its confidence.")
    order = forms.TypedChoiceField(choices=Campaign.Order.choices, required=False, empty_value=Campaign.Order.DEFAULT,
                                   initial=Campaign.Order.DEFAULT, label="Item order",
                                   help_text="Least confident first (active learning): with a classifier's "
                                             "suggestions, the items it is least sure of are annotated first.")

    def __init__(self, *args, versions, schemas, annotators, models, **kwargs):
        super().__init__(*args, **kwargs)
        self.versions = {v.pk: v for v in versions}
        self.fields["dataset_version"].choices = [(v.pk, f"{v.dataset.name} v{v.number} ({v.row_count} rows)")
                                                  for v in versions]
        self.fields["schema"].choices = (
            [(f"saved:{s.pk}", f"{s.name} (v{s.version})") for s in schemas]
            + [(f"preset:{key}", label) for key, (label, _) in PRESETS.items()] + [("custom", "Custom (JSON below)")])
        self.fields["assignees"].choices = [(u.username, u.username) for u in annotators]
        self.fields["suggestion_model"].choices = [("", "none")] + [(m.pk, _model_choice(m)) for m in models]

    def schema_choice(self) -> tuple[str, object]:
        """("saved", id) or ("fields", the fields of a preset or of the JSON)."""
        choice = self.cleaned_data["schema"]
        if choice.startswith("saved:"):
            return "saved", int(choice.split(":", 1)[1])
        if choice == "preset:classify":
            name, fields = PRESETS["classify"]
            return "fields", (name, [{**fields[0], "labels": self.classify_labels()}])
        if choice.startswith("preset:"):
            return "fields", PRESETS[choice.split(":", 1)[1]]
        try:
            return "fields", ("Custom", json.loads(self.cleaned_data["fields_json"] or ""))
        except json.JSONDecodeError as exc:
            raise forms.ValidationError({"fields_json": f"not valid JSON: {exc.msg} (line {exc.lineno})"}) from None

    def classify_labels(self) -> list[str]:
        """The labels typed in (one a line), else those of the chosen dataset version."""
        typed = [line.strip() for line in self.cleaned_data["labels"].splitlines() if line.strip()]
        labels = typed or version_labels(self.versions[self.cleaned_data["dataset_version"]])
        if not labels:
            raise forms.ValidationError({"labels": "This dataset version has no labels: add the labels to "
                                                   "classify into."})
        return labels

    def labels_by_version(self) -> dict[int, list[str]]:
        """What the label editor starts from when a version is chosen."""
        return {pk: version_labels(version) for pk, version in self.versions.items()}

    def field_for(self, name: str | None) -> str | None:
        if not name:
            return None
        if name.startswith("fields[0].labels") and self.cleaned_data.get("schema") == "preset:classify":
            return "labels"
        if name.startswith("fields"):
            return "fields_json"
        return name if name in self.fields else None


class ExportForm(forms.Form):
    kind = forms.ChoiceField(choices=[("resolved", "Resolved answers (a new version of the dataset)"),
                                      ("preferences", "Preferences as prompt / chosen / rejected")])
    mode = forms.ChoiceField(choices=[("majority", "Majority vote (adjudication and reviews first)"),
                                      ("adjudicated", "Adjudicated or reviewer-accepted only"),
                                      ("accepted", "Reviewer-accepted only")])
    min_agreement = forms.FloatField(required=False, min_value=0, max_value=1, label="Minimum agreement",
                                     help_text="0–1: keep only examples where at least this share agreed.")
    new_dataset_name = forms.CharField(required=False, max_length=120, label="New dataset name",
                                       help_text="Empty: a new version of the campaign's dataset (resolved answers).")
