"""Registering a model by its Hugging Face id, from the local cache (nothing is downloaded:
MODEL_HUB_DOWNLOADS is off by default and no hub is reachable here)."""

import os

import pytest

from apps.registry.models import RegisteredModel
from apps.registry.services import run_inspection
from tests.workers.test_models import save_tiny_model

pytestmark = pytest.mark.django_db
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_model(cache, repo_id: str) -> None:
    """The cache's own layout: snapshot files are links into blobs/, refs/main names the commit."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    staging = repo / "staging"
    save_tiny_model(staging)
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for index, file in enumerate(sorted(staging.iterdir())):
        blob = repo / "blobs" / f"blob{index}"
        file.rename(blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / file.name)
    staging.rmdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)


def register(client, project, **body):
    return client.post(f"/api/projects/{project.pk}/models/", {"name": "Hub model", **body},
                       content_type="application/json")


def test_a_cached_hub_model_registers_ready_with_its_metadata(client, scientist, project, settings, tmp_path):
    settings.HF_HUB_CACHE = tmp_path / "hub"
    cache_model(settings.HF_HUB_CACHE, "acme/tiny-llama")
    client.force_login(scientist)
    response = register(client, project, hub_id="acme/tiny-llama")
    assert response.status_code == 201, response.content
    run_inspection(response.json()["id"])  # the worker's task, here where the test's settings hold
    model = RegisteredModel.objects.get()
    assert model.status == "ready" and model.info["architecture"] == "LlamaForCausalLM"
    assert model.weights_path.endswith(f"snapshots/{COMMIT}")


@pytest.mark.parametrize("body, field, words", [
    ({"hub_id": "acme/not-cached"}, "hub_id", "not in this server's Hugging Face cache"),
    ({"hub_id": "../../etc/passwd"}, "hub_id", "org/name"),
    ({"hub_id": "https://evil.example/x"}, "hub_id", "org/name"),
    ({"hub_id": "acme/tiny-llama", "revision": "../main"}, "revision", "branch"),
    ({"hub_id": "acme/tiny-llama", "path": "/srv/models/x"}, "hub_id", "not both"),
])
def test_hub_ids_that_cannot_be_used_are_refused_naming_the_field(client, scientist, project, settings, tmp_path,
                                                                  body, field, words):
    settings.HF_HUB_CACHE = tmp_path / "hub"
    cache_model(settings.HF_HUB_CACHE, "acme/tiny-llama")
    client.force_login(scientist)
    response = register(client, project, **body)
    assert response.status_code == 400 and response.json()["field"] == field and words in response.json()["detail"]
    assert not RegisteredModel.objects.exists()


def test_a_cached_snapshot_linking_out_of_the_cache_is_refused(client, scientist, project, settings, tmp_path):
    settings.HF_HUB_CACHE = tmp_path / "hub"
    cache_model(settings.HF_HUB_CACHE, "acme/tiny-llama")
    snapshot = settings.HF_HUB_CACHE / "models--acme--tiny-llama" / "snapshots" / COMMIT
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (snapshot / "generation_config.json").unlink(missing_ok=True)
    os.symlink(outside, snapshot / "generation_config.json")
    client.force_login(scientist)
    response = register(client, project, hub_id="acme/tiny-llama")
    assert response.status_code == 201, response.content
    run_inspection(response.json()["id"])  # the worker's task, here where the test's settings hold
    model = RegisteredModel.objects.get()
    assert model.status == "failed" and "links outside the configured model roots" in model.error
    assert model.weights_path == "" and model.info == {}
