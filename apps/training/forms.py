"""The launch form: the job's inputs plus the TrainConfig fields, generated from the config
dataclass's field metadata (label, help, section, choices, min/max: workers.training.config.option),
so a new config field appears here without touching this module. Ranges are checked by the service
(TrainConfig.validate reads the same metadata; the same for the API), whose errors name
`config.<field>`; the view shows them on the field of that name. The form only renders the ranges
(min / max attributes of the inputs)."""

import dataclasses
import typing

from django import forms

from workers.training.config import SECTIONS, TrainConfig

SPLITS = [("", "all rows"), ("train", "train"), ("validation", "validation"), ("test", "test")]
EVAL_SPLITS = [("", "no evaluation"), ("validation", "validation"), ("test", "test"), ("train", "train")]
CUSTOM = "custom"  # the target-modules preset that means "the list in target_custom"


def _input_attrs(meta: dict) -> dict:
    """min / max attributes for the bounds a browser can state (inclusive ones)."""
    attrs = {}
    if meta.get("min") is not None and not meta.get("min_exclusive"):
        attrs["min"] = meta["min"]
    if meta.get("max") is not None and not meta.get("max_exclusive"):
        attrs["max"] = meta["max"]
    return attrs


def config_form_fields(config_class: type = TrainConfig) -> dict[str, forms.Field]:
    """{form field name: field} for every field of `config_class` whose metadata names a section.
    A `str | list[str]` field (target_modules) becomes two: `<name>_preset` and `<name>_custom`."""
    hints = typing.get_type_hints(config_class)
    fields: dict[str, forms.Field] = {}
    for f in dataclasses.fields(config_class):
        meta = f.metadata
        if not meta.get("section"):
            continue
        kind = hints[f.name]
        optional = type(None) in typing.get_args(kind)
        common = {"label": meta["label"], "help_text": meta.get("help", "")}
        if list in {typing.get_origin(arg) for arg in typing.get_args(kind)}:  # a preset name or a list of names
            fields[_preset(f.name)] = forms.ChoiceField(choices=[*meta["choices"], (CUSTOM, "custom list")],
                                                        label=meta["label"])
            fields[_custom(f.name)] = forms.CharField(required=False, label=f"Custom {meta['label'].lower()}",
                                                      help_text=meta.get("help", ""))
        elif meta.get("choices"):
            fields[f.name] = forms.ChoiceField(choices=list(meta["choices"]), **common)
        elif kind is bool:
            fields[f.name] = forms.BooleanField(required=False, **common)
        elif int in (kind, *typing.get_args(kind)):
            fields[f.name] = forms.IntegerField(required=not optional, widget=forms.NumberInput(_input_attrs(meta)),
                                                **common)
        elif float in (kind, *typing.get_args(kind)):
            fields[f.name] = forms.FloatField(required=not optional, widget=forms.NumberInput(_input_attrs(meta)),
                                              **common)
        else:  # text: empty means the default
            fields[f.name] = forms.CharField(required=False, **common)
    return fields


# The form names of a list option's two inputs (kept as they were for target_modules).
LIST_INPUTS = {"target_modules": ("target_preset", "target_custom")}


def _preset(name: str) -> str:
    return LIST_INPUTS.get(name, (f"{name}_preset",))[0]


def _custom(name: str) -> str:
    return LIST_INPUTS.get(name, (None, f"{name}_custom"))[1]


def _is_list_option(config_class: type, name: str) -> bool:
    kind = typing.get_type_hints(config_class)[name]
    return list in {typing.get_origin(arg) for arg in typing.get_args(kind)}


class LaunchForm(forms.Form):
    config_class = TrainConfig

    name = forms.CharField(max_length=120)
    base_model = forms.TypedChoiceField(coerce=int, label="Base model")
    dataset_version = forms.TypedChoiceField(coerce=int, label="Dataset version")
    train_split = forms.ChoiceField(choices=SPLITS, required=False, label="Training split")
    eval_split = forms.ChoiceField(choices=EVAL_SPLITS, required=False, label="Evaluation split")
    priority = forms.ChoiceField(choices=[("normal", "normal"), ("low", "low"), ("high", "high (project admins)")],
                                 help_text="The shared GPU queue serves high, then normal, then low.")

    # The inputs' places in the "Inputs" section: before and after that section's config fields.
    INPUTS = (["name", "priority"], ["base_model", "dataset_version", "train_split", "eval_split"])

    def __init__(self, *args, models=(), versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields.update(config_form_fields(self.config_class))
        self.fields["base_model"].choices = [(m.pk, m.name) for m in models]
        self.fields["dataset_version"].choices = [
            (v.pk, f"{v.dataset.name} v{v.number} ({v.row_count} rows)") for v in versions]

    @classmethod
    def config_fields(cls) -> list[dataclasses.Field]:
        """The config fields on the form, in the dataclass's order."""
        return [f for f in dataclasses.fields(cls.config_class) if f.metadata.get("section")]

    @classmethod
    def sections(cls) -> list[tuple[str, list[str]]]:
        """[(legend, form field names)], the sections in SECTIONS order, fields in the dataclass's."""
        result = []
        for section in SECTIONS:
            names = []
            for f in cls.config_fields():
                if f.metadata["section"] == section:
                    names += ([_preset(f.name), _custom(f.name)] if _is_list_option(cls.config_class, f.name)
                              else [f.name])
            if section == SECTIONS[0]:
                names = [*cls.INPUTS[0], *names, *cls.INPUTS[1]]
            if names:
                result.append((section, names))
        return result

    def fieldsets(self) -> list[tuple[str, list]]:
        return [(legend, [self[name] for name in names]) for legend, names in self.sections()]

    @classmethod
    def initial_from(cls, config: dict, **inputs) -> dict:
        """The form's initial values from a stored config (a missing key takes its default)."""
        defaults = cls.config_class()
        initial = {}
        for f in cls.config_fields():
            value = config.get(f.name, getattr(defaults, f.name))
            if _is_list_option(cls.config_class, f.name):
                if isinstance(value, list):
                    initial.update({_preset(f.name): CUSTOM, _custom(f.name): ", ".join(value)})
                else:
                    initial[_preset(f.name)] = value
            else:
                initial[f.name] = value
        return {**initial, **inputs}

    def launch_arguments(self) -> dict:
        data = self.cleaned_data
        config = {}
        for f in self.config_fields():
            if _is_list_option(self.config_class, f.name):
                preset = data[_preset(f.name)]
                config[f.name] = ([name.strip() for name in data[_custom(f.name)].split(",") if name.strip()]
                                  if preset == CUSTOM else preset)
            elif isinstance(self.fields[f.name], forms.CharField):
                config[f.name] = data[f.name] or getattr(self.config_class(), f.name)  # empty: the default
            else:
                config[f.name] = data[f.name]
        return {"name": data["name"], "priority": data["priority"], "base_model": data["base_model"],
                "dataset_version": data["dataset_version"],
                "train_split": data["train_split"], "eval_split": data["eval_split"], "config": config}

    def field_for(self, service_field: str | None) -> str | None:
        """The form field a service error names (`config.batch_size` -> batch_size)."""
        name = (service_field or "").removeprefix("config.")
        if name in {f.name for f in self.config_fields()} and _is_list_option(self.config_class, name):
            return _custom(name) if self.data.get(_preset(name)) == CUSTOM else _preset(name)
        return name if name in self.fields else None
