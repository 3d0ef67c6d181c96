"""Registering models: inspection without loading, refusals with reasons, the demo model."""

import json
import pickle
from pathlib import Path

import pytest

from apps.projects.models import AuditEvent
from apps.registry.models import RegisteredModel
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db


def tiny_model_dir(path: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, safe_serialization=True)
    return path, sum(p.numel() for p in model.parameters())


@pytest.fixture
def model_root(settings, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    settings.MODEL_ROOTS = [root]
    return root


@pytest.fixture
def scientist_client(client, scientist):
    client.force_login(scientist)
    return client


def register(client, project, name, path):
    return client.post(f"/api/projects/{project.pk}/models/", {"name": name, "path": str(path)},
                       content_type="application/json")


def inspected(client, model_id: int) -> dict:
    """Run the worker's inspection of a model registered in this test (whose settings the worker
    process would not see), then read it back through the API."""
    from apps.registry.services import run_inspection

    run_inspection(model_id)
    return client.get(f"/api/models/{model_id}/").json()


def test_a_safetensors_directory_is_inspected_and_registered_ready(scientist_client, project, model_root):
    path, parameters = tiny_model_dir(model_root / "tiny")
    answer = register(scientist_client, project, "Tiny llama", path)
    assert answer.status_code == 201, answer.content
    assert answer.json()["status"] == "checking" and answer.json()["format"] == "hf_dir"
    assert scientist_client.get(f"/api/models/{answer.json()['id']}/memory-estimate/").status_code == 400
    body = inspected(scientist_client, answer.json()["id"])
    assert body["status"] == "ready" and body["format"] == "hf_dir"
    assert body["info"]["parameters"] == parameters and body["info"]["context_length"] == 256
    assert AuditEvent.objects.filter(action="model.register", project=project).exists()
    estimate = scientist_client.get(f"/api/models/{body['id']}/memory-estimate/",
                                    {"mode": "lora", "batch_size": 8, "seq_len": 128}).json()
    bigger = scientist_client.get(f"/api/models/{body['id']}/memory-estimate/",
                                  {"mode": "lora", "batch_size": 16, "seq_len": 128}).json()
    assert 0 < estimate["total_bytes"] < bigger["total_bytes"]


def _pickle_only(root: Path) -> Path:
    directory = root / "pickled"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    canary = root.parent / "canary"

    class Payload:
        def __reduce__(self):
            return (open, (str(canary), "w"))

    (directory / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    return directory


@pytest.mark.parametrize("make, complaint", [
    (lambda root: root / "missing", "does not exist"),
    (lambda root: Path("/etc"), "outside"),
    (lambda root: root / ".." / "elsewhere", "'..' is not allowed"),
    (_pickle_only, "pickle"),
])
def test_bad_model_paths_are_refused_with_the_reason_and_nothing_registered(scientist_client, project, model_root,
                                                                            make, complaint):
    (model_root.parent / "elsewhere").mkdir(exist_ok=True)
    answer = register(scientist_client, project, "Bad", make(model_root))
    assert answer.status_code == 400, answer.content
    assert answer.json()["field"] == "path" and complaint in answer.json()["detail"].lower()
    assert not RegisteredModel.objects.exists()
    assert not (model_root.parent / "canary").exists()  # the pickle was never opened


def test_a_symlink_out_of_the_roots_is_refused(scientist_client, project, model_root, tmp_path):
    path, _ = tiny_model_dir(tmp_path / "outside")
    (model_root / "link").symlink_to(path)
    answer = register(scientist_client, project, "Sneaky", model_root / "link")
    assert answer.status_code == 400 and "outside" in answer.json()["detail"]


def test_remote_code_configs_are_refused_by_the_inspection(scientist_client, project, model_root):
    path, _ = tiny_model_dir(model_root / "custom")
    config = json.loads((path / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (path / "config.json").write_text(json.dumps(config))
    answer = register(scientist_client, project, "Custom", path)
    assert answer.status_code == 201 and answer.json()["status"] == "checking"
    body = inspected(scientist_client, answer.json()["id"])
    assert body["status"] == "failed" and "trust_remote_code is never enabled" in body["error"]
    assert body["info"] == {} and RegisteredModel.objects.get(pk=body["id"]).weights_path == ""


def test_annotators_and_viewers_cannot_register(client, annotator, viewer, project, model_root):
    path, _ = tiny_model_dir(model_root / "tiny")
    for person in (annotator, viewer):
        client.force_login(person)
        answer = register(client, project, "Nope", path)
        assert answer.status_code == 403
        assert answer.json()["missing_permission"] in ("model.view", "model.register")
    assert not RegisteredModel.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_demo_gguf_is_registered_then_converted_by_a_worker(scientist_client, project, celery_worker):
    from workers.models import demo_model_gguf

    gguf = demo_model_gguf()
    from apps.registry.services import model_register

    model = model_register(user=project.memberships.get(role="scientist").user, project=project,
                           name="SmolLM2", path=str(gguf))
    assert model.status == "checking" and model.format == "gguf"
    ready = wait_for(lambda: RegisteredModel.objects.filter(pk=model.pk, status__in=["ready", "failed"]).first(),
                     timeout=240, interval=1, what="the inspection and conversion")
    assert ready.status == "ready", ready.error
    assert ready.info["architecture"] == "llama" and 130_000_000 < ready.info["parameters"] < 140_000_000
    assert (Path(ready.weights_path) / "model.safetensors").exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_demo_model_whose_conversion_was_cut_short_is_converted_at_the_next_start(celery_worker):
    """`manage.py up` stopped during the first conversion: the worker was killed, its message
    waits out the broker's visibility timeout. The next start (seed_demo) asks again."""
    from django.core.management import call_command

    from apps.projects.management.commands.seed_demo import DEMO_MODEL, DEMO_PROJECT, DEMO_USERNAME
    from apps.projects.services import project_create
    from tests.factories import UserFactory
    from workers.models import demo_model_gguf

    admin = UserFactory(username=DEMO_USERNAME)
    project = project_create(user=admin, name=DEMO_PROJECT)
    stuck = RegisteredModel.objects.create(project=project, name=DEMO_MODEL, format="gguf", info={},
                                           source_path=str(demo_model_gguf()), status="converting")
    call_command("seed_demo")
    ready = wait_for(lambda: RegisteredModel.objects.filter(pk=stuck.pk, status__in=["ready", "failed"]).first(),
                     timeout=240, interval=1, what="the conversion asked for again")
    assert ready.status == "ready", ready.error
    assert RegisteredModel.objects.filter(name=DEMO_MODEL).count() == 1  # not registered twice


def test_a_model_can_be_shared_with_one_person_without_a_project_role(client, admin, outsider, project, model_root):
    path, _ = tiny_model_dir(model_root / "tiny")
    client.force_login(admin)
    shared = register(client, project, "Shared", path).json()
    other = register(client, project, "Private", path).json()
    answer = client.post(f"/api/projects/{project.pk}/grants/", {"username": outsider.username, "object_type": "model",
                                                                  "object_id": shared["id"], "permission": "model.view"},
                         content_type="application/json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["object_type"] == "model" and answer.json()["permission"] == "model.view"
    mismatched = client.post(f"/api/projects/{project.pk}/grants/", {"username": outsider.username,
                                                                      "object_type": "model", "object_id": shared["id"],
                                                                      "permission": "dataset.view"},
                             content_type="application/json")
    assert mismatched.status_code == 400 and mismatched.json()["field"] == "permission"
    client.force_login(outsider)
    assert client.get(f"/api/models/{shared['id']}/").status_code == 200
    assert client.get(f"/api/models/{other['id']}/").status_code == 404
    assert client.get(f"/api/projects/{project.pk}/models/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_start_command_offers_the_demo_model_to_every_project_from_the_model_roots(client, settings, tmp_path,
                                                                                      outsider, other_project):
    """A new project is not a dead end: the demo model lies in the first model root, listed on the
    models page and registered by name."""
    from django.core.management import call_command

    from workers.models import demo_model_gguf

    settings.MODEL_ROOTS = [tmp_path / "models"]
    call_command("seed_demo")
    gguf = demo_model_gguf()
    offered = tmp_path / "models" / gguf.name
    assert offered.is_file() and offered.stat().st_size == gguf.stat().st_size
    call_command("seed_demo")  # idempotent: offered once

    client.force_login(outsider)  # owner of another project, not of the demo project
    page = client.get(f"/projects/{other_project.pk}/models/").content.decode()
    assert f"<code>{gguf.name}</code>" in page and f'<option value="{gguf.name}">' in page
    answer = register(client, other_project, "Demo here", gguf.name)
    try:
        assert answer.status_code == 201, answer.content
        assert answer.json()["format"] == "gguf" and answer.json()["status"] == "checking"
        assert answer.json()["source_path"] == str(offered.resolve())
    finally:  # no conversion is wanted here: their queued messages find nothing to do
        RegisteredModel.all_objects.all().delete()


def test_the_request_reads_no_weight_header_a_worker_does(scientist_client, project, model_root):
    """A safetensors header can be made as large as an attacker likes (10^6 tensors, 70 MB parsed
    in the web process stalled every request): registration only looks at names; the worker
    reads the header and refuses it with the reason."""
    path, _ = tiny_model_dir(model_root / "huge-header")
    declared = 15 * 1024 * 1024
    with (path / "model.safetensors").open("wb") as weights:
        weights.write(declared.to_bytes(8, "little") + b"[" + b" " * (declared - 2) + b"]")
    answer = register(scientist_client, project, "Huge header", path)
    assert answer.status_code == 201, answer.content
    assert answer.json()["status"] == "checking" and answer.json()["info"] == {}
    body = inspected(scientist_client, answer.json()["id"])
    assert body["status"] == "failed" and "model.safetensors is corrupted" in body["error"]
