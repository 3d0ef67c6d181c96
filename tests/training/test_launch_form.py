"""The launch form is generated from TrainConfig's field metadata: every field with a section is on
the form with its label, help, choices and range, and a field added to a config class appears on the
form (and in the API schema) without touching the form."""

import dataclasses
from dataclasses import dataclass

from django import forms

from apps.training.forms import LaunchForm, config_form_fields
from apps.training.serializers import config_schema
from workers.training import ConfigError, TrainConfig
from workers.training.config import SECTIONS, option


def test_every_config_field_with_a_section_is_on_the_form_with_its_metadata():
    form = LaunchForm()
    on_form = {name for _, names in form.sections() for name in names}
    for f in dataclasses.fields(TrainConfig):
        meta = f.metadata
        assert meta["label"], f"{f.name} has no label"
        if not meta["section"]:
            assert f.name not in form.fields
            continue
        name = "target_preset" if f.name == "target_modules" else f.name
        assert name in on_form, f"{f.name} is not in any fieldset"
        field = form.fields[name]
        assert field.label == meta["label"]
        if f.name != "target_modules":
            assert field.help_text == meta["help"]
        if meta["choices"]:
            assert [value for value, _ in meta["choices"]] == [value for value, _ in field.choices][:len(meta["choices"])]
        attrs = field.widget.attrs
        for bound in ("min", "max"):
            if meta[bound] is not None and not meta[f"{bound}_exclusive"]:
                assert attrs[bound] == meta[bound], (f.name, bound)
            else:
                assert bound not in attrs, (f.name, bound)


def test_validate_refuses_values_outside_the_metadata_ranges_and_choices_naming_the_field():
    for f in dataclasses.fields(TrainConfig):
        meta = f.metadata
        bad = []
        if meta["min"] is not None:
            bad.append(meta["min"] if meta["min_exclusive"] else meta["min"] - 1)
        if meta["max"] is not None:
            bad.append(meta["max"] if meta["max_exclusive"] else meta["max"] + 1)
        if meta["choices"]:
            bad.append("no such choice")
        for value in bad:
            try:
                TrainConfig(**{f.name: value}).validate()
            except ConfigError as exc:
                assert exc.field == f.name, (f.name, value, exc)
            else:
                raise AssertionError(f"{f.name}={value!r} was accepted")


@dataclass
class GrownConfig(TrainConfig):
    """TrainConfig with an option added, as a contributor would add one."""

    label_smoothing: float = option(0.0, label="Label smoothing", section=SECTIONS[3], min=0, max=1,
                                    help="Spread a little of the target's probability over other tokens.")
    schedule_shape: str = option("flat", label="Schedule shape", section=SECTIONS[3],
                                 choices=(("flat", "flat"), ("wavy", "wavy")))


class GrownLaunchForm(LaunchForm):
    config_class = GrownConfig


def test_a_field_added_to_the_config_appears_on_the_form_and_in_the_api_schema_untouched():
    generated = config_form_fields(GrownConfig)
    assert isinstance(generated["label_smoothing"], forms.FloatField)
    assert generated["label_smoothing"].label == "Label smoothing"
    assert generated["label_smoothing"].widget.attrs["max"] == 1
    assert [value for value, _ in generated["schedule_shape"].choices] == ["flat", "wavy"]

    form = GrownLaunchForm()
    assert "label_smoothing" in dict(form.sections())[SECTIONS[3]]
    initial = GrownLaunchForm.initial_from(GrownConfig().as_dict(), name="run", priority="normal", base_model=1,
                                           dataset_version=2, train_split="", eval_split="")
    data = {key: value for key, value in initial.items() if value is not None and value is not False}

    class Model:
        pk, name = 1, "base"

    class Version:
        pk, number, row_count = 2, 1, 3
        dataset = type("Dataset", (), {"name": "qa"})

    bound = GrownLaunchForm({**data, "label_smoothing": "0.1"}, models=[Model], versions=[Version])
    assert bound.is_valid(), bound.errors
    config = bound.launch_arguments()["config"]
    assert config["label_smoothing"] == 0.1 and config["schedule_shape"] == "flat"
    GrownConfig.from_dict(config).validate()

    schema = config_schema(GrownConfig)["properties"]
    assert schema["label_smoothing"]["maximum"] == 1 and schema["schedule_shape"]["enum"] == ["flat", "wavy"]
    assert schema["dpo_beta"]["exclusiveMinimum"] is True
