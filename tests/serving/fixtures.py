"""A model with a version and a production alias, as rows (no weights): for the canary and the
serving-figure tests, which judge what the rows say."""

import pytest

from apps.registry.models import ModelAlias, RegisteredModel


def ready(project, name, **extra) -> RegisteredModel:
    return RegisteredModel.objects.create(project=project, name=name, format=extra.pop("format", "hf_dir"),
                                          source_path="/m", weights_path="/m", status="ready", info={}, **extra)


@pytest.fixture(name="family")
def alias_family_fixture(project):
    """(the base "Support", its adapter "Support v1", the base's production alias on the base)."""
    base = ready(project, "Support")
    v1 = ready(project, "Support v1", kind="adapter", base_model=base, format="peft")
    alias = ModelAlias.objects.create(project=project, model=base, version=base, name="production")
    return base, v1, alias
