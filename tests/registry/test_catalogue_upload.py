"""A site admin uploads a base model into the catalogue (safetensors + config/tokenizer, or one
GGUF): streamed to a folder of its own, checked and loaded by a worker, then offered to projects.
Bad files are refused naming the field, and leave nothing behind."""

import json
import struct
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from apps.accounts import services as account_services
from apps.projects.models import AuditEvent
from apps.registry.models import CatalogueModel
from apps.registry.services import run_catalogue_preparation
from apps.registry.uploads import upload_root
from tests.conftest import wait_for
from tests.factories import MembershipFactory
from tests.workers.test_models import save_tiny_model

URL = "/api/catalogue/upload/"


def model_files(directory: Path) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(path.name, path.read_bytes()) for path in sorted(directory.iterdir())
            if path.is_file()]


@pytest.fixture
def tiny_dir(tmp_path) -> Path:
    save_tiny_model(tmp_path / "tiny")
    return tmp_path / "tiny"


def upload(client, name, files, **extra):
    return client.post(URL, {"name": name, "files": files, **extra})


@pytest.fixture
def left_behind():
    """What the test left in the upload folder (earlier tests' ready models are not its own)."""
    def listed() -> set:
        return set(upload_root().iterdir()) if upload_root().exists() else set()

    before = listed()
    return lambda: sorted(path.name for path in listed() - before)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_uploaded_safetensors_model_is_checked_and_loaded_by_a_worker_then_enabled(
        client, site_admin, admin, project, tiny_dir, celery_worker, left_behind):
    client.force_login(site_admin)
    answer = upload(client, "Uploaded tiny", model_files(tiny_dir), default_enabled="true")
    assert answer.status_code == 201, answer.content
    assert answer.json()["status"] == "checking"
    entry = wait_for(lambda: CatalogueModel.objects.filter(pk=answer.json()["id"]).exclude(
        status="checking").first(), timeout=120, what="the worker's check")
    assert entry.status == "ready", entry.error
    assert entry.info["model_type"] == "llama" and Path(entry.weights_path).is_relative_to(upload_root())
    assert {p.name for p in Path(entry.source_path).iterdir()} == {p.name for p in tiny_dir.iterdir()}
    assert not [name for name in left_behind() if name.startswith(".incoming")]
    event = AuditEvent.objects.get(action="catalogue.upload")
    assert event.after["format"] == "hf_dir" and "config.json" in event.after["files"]
    client.force_login(admin)  # a project's admin enables it: a row on the same files
    enabled = client.post(f"/api/projects/{project.pk}/catalogue/", {"catalogue_model": entry.pk},
                          content_type="application/json")
    assert enabled.status_code == 201 and enabled.json()["status"] == "ready"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_uploaded_gguf_file_is_converted_and_loaded_by_a_worker(client, site_admin, celery_worker):
    from workers.models import demo_model_gguf

    gguf = demo_model_gguf()  # SmolLM2-135M-Instruct Q4_1: a real GGUF with its tokenizer
    client.force_login(site_admin)
    with gguf.open("rb") as handle:
        answer = upload(client, "Uploaded GGUF", [handle])
    assert answer.status_code == 201, answer.content
    entry = wait_for(lambda: CatalogueModel.objects.filter(pk=answer.json()["id"], status__in=["ready", "failed"])
                     .first(), timeout=280, interval=1, what="the conversion and load")
    assert entry.status == "ready", entry.error
    assert entry.format == "gguf" and Path(entry.weights_path).is_dir()
    assert Path(entry.source_path).name == gguf.name and Path(entry.source_path).is_relative_to(upload_root())


def safetensors_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("weights, reason", [
    # cut off half-way through its data
    (lambda real: real[: len(real) // 2], "corrupted"),
    # a header that claims a tensor of 2^40 floats in a file of 16 bytes
    (lambda real: safetensors_bytes({"model.embed_tokens.weight": {"dtype": "F32", "shape": [2 ** 20, 2 ** 20],
                                                                   "data_offsets": [0, 2 ** 42]}}, b"\0" * 16),
     "corrupted"),
    # a header length larger than the file
    (lambda real: struct.pack("<Q", 2 ** 62) + b"{}", "corrupted"),
], ids=["truncated", "huge-tensor-claimed", "huge-header-length"])
def test_broken_weights_fail_the_workers_check_with_the_reason_and_leave_no_files(
        client, site_admin, tiny_dir, weights, reason, left_behind, celery_worker):
    client.force_login(site_admin)
    files = [SimpleUploadedFile(p.name, weights(p.read_bytes()) if p.suffix == ".safetensors" else p.read_bytes())
             for p in sorted(tiny_dir.iterdir())]
    answer = upload(client, "Broken", files)
    assert answer.status_code == 201, answer.content  # the web request opens no header
    entry = wait_for(lambda: CatalogueModel.objects.filter(pk=answer.json()["id"]).exclude(
        status="checking").first(), timeout=100, what="the worker's check")
    assert entry.status == "failed" and reason in entry.error and "model.safetensors" in entry.error, entry.error
    wait_for(lambda: not Path(entry.source_path).exists(), timeout=10, what="the upload discarded")
    assert left_behind() == []


@pytest.mark.django_db  # one transaction: the upload's enqueue never fires, this test is the only worker
@pytest.mark.timeout(120)
def test_a_redelivered_check_running_beside_the_first_keeps_the_first_verdict(client, site_admin, tiny_dir,
                                                                              left_behind, monkeypatch):
    """The broker may deliver the check twice at once. Here the second delivery has read the row
    (still checking) when the first finishes, fails the model and discards its files: the second
    then finds no files, and must not overwrite the first's reason with "does not exist"."""
    import workers.models

    client.force_login(site_admin)
    files = [SimpleUploadedFile(p.name, p.read_bytes()[:100] if p.suffix == ".safetensors" else p.read_bytes())
             for p in sorted(tiny_dir.iterdir())]
    entry_id = upload(client, "Broken twice", files).json()["id"]
    real_resolve, first_finished = workers.models.resolve_model_path, []

    def resolve_after_the_first_delivery(*args, **kwargs):
        if not first_finished:
            first_finished.append(True)
            run_catalogue_preparation(entry_id)  # the first delivery runs to its end meanwhile
        return real_resolve(*args, **kwargs)

    monkeypatch.setattr(workers.models, "resolve_model_path", resolve_after_the_first_delivery)
    run_catalogue_preparation(entry_id)
    entry = CatalogueModel.objects.get(pk=entry_id)
    assert first_finished and entry.status == "failed", entry.error
    assert "corrupted" in entry.error and "does not exist" not in entry.error, entry.error
    assert not Path(entry.source_path).exists() and left_behind() == []


@pytest.mark.django_db
@pytest.mark.parametrize("names, detail", [
    (["pytorch_model.bin", "config.json"], "pickle checkpoint"),
    (["model.pt"], "pickle checkpoint"),
    (["weights.pkl"], "pickle checkpoint"),
    (["model safetensors;rm -rf.safetensors", "config.json"], "not a plain file name"),
    (["..safetensors", "config.json"], "not a plain file name"),
    (["model.safetensors"], "config.json"),
    (["config.json", "tokenizer.json"], "No .safetensors"),
    (["model.safetensors", "config.json", "run.py"], "not a file of a safetensors model"),
    (["model.gguf", "config.json"], "uploaded alone"),
    (["model.safetensors", "model.safetensors", "config.json"], "same name"),
])
def test_bad_files_are_refused_naming_the_field_and_nothing_is_written(client, site_admin, names, detail, left_behind):
    client.force_login(site_admin)
    answer = upload(client, "Bad", [SimpleUploadedFile(name, b"x" * 16) for name in names])
    assert answer.status_code == 400 and answer.json()["field"] == "files", answer.content
    assert detail in answer.json()["detail"]
    assert CatalogueModel.objects.count() == 0 and left_behind() == []


@pytest.mark.django_db
def test_a_path_in_a_file_name_never_leaves_the_upload_folder(client, site_admin, tiny_dir, left_behind):
    client.force_login(site_admin)
    files = model_files(tiny_dir)
    files[0].name = "../../../escaped-config.json"  # Django keeps only the last part; what is left must be allowed
    answer = upload(client, "Traversal", files)
    assert answer.status_code == 400 and answer.json()["field"] == "files"
    assert "escaped-config.json" in answer.json()["detail"]
    assert left_behind() == [] and not (upload_root().parent / "escaped-config.json").exists()


@pytest.mark.django_db
def test_oversize_and_malformed_requests_are_refused_naming_the_field(client, site_admin, tiny_dir, settings, left_behind):
    client.force_login(site_admin)
    settings.MAX_UPLOAD_BYTES = 1024
    over = upload(client, "Too big", model_files(tiny_dir))
    assert over.status_code == 400 and over.json()["field"] == "files" and "at most 1,024" in over.json()["detail"]
    assert left_behind() == []
    for body, field in (({"name": "No files"}, "files"), ({"files": model_files(tiny_dir)}, "name"),
                        ({"name": "x" * 121, "files": model_files(tiny_dir)}, "name"),
                        ({"name": "a@b", "files": model_files(tiny_dir)}, "name"),
                        ({"name": "Empty", "files": [SimpleUploadedFile("config.json", b"")]}, "files")):
        refused = client.post(URL, body)
        assert refused.status_code == 400 and (refused.json().get("field") == field or field in refused.json()), \
            (body.keys(), refused.content)
    json_body = client.post(URL, {"name": "JSON"}, content_type="application/json")
    assert json_body.status_code == 415
    assert CatalogueModel.objects.count() == 0 and left_behind() == []


@pytest.mark.django_db
def test_only_a_signed_in_site_admin_uploads(client, owner, project, site_admin, tiny_dir, left_behind):
    assert upload(client, "Anon", model_files(tiny_dir)).status_code in (401, 403)
    client.force_login(owner)  # a project's owner is not a site admin: told nothing exists
    assert upload(client, "Owner", model_files(tiny_dir)).status_code == 404
    client.logout()
    MembershipFactory(project=project, user=site_admin, role="owner")
    _, key = account_services.token_create(user=site_admin, name="api", permissions=["project.view"],
                                           project=project, expires_at=timezone.now() + timedelta(days=1))
    # An API token carries project permissions only, a site admin's included.
    by_token = client.post(URL, {"name": "Token", "files": model_files(tiny_dir)}, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert by_token.status_code == 404
    assert CatalogueModel.objects.count() == 0 and left_behind() == []
    assert not AuditEvent.objects.filter(action="catalogue.upload").exists()


@pytest.mark.django_db(transaction=True)
def test_the_server_takes_model_sized_uploads_on_the_upload_path_only_up_to_its_limit(live_asgi):
    import socket
    from urllib.parse import urlparse

    import requests

    # Past the 20 MB body limit of other paths: the upload path lets it through to Django (which
    # then asks who is calling), as it does dataset imports.
    big = requests.post(f"{live_asgi}{URL}", files={"files": ("model.safetensors", b"\0" * (25 * 2**20))},
                        data={"name": "Big"}, timeout=60)
    assert big.status_code in (401, 403), big.status_code
    elsewhere = requests.post(f"{live_asgi}/api/catalogue/", files={"files": ("m.safetensors", b"\0" * (25 * 2**20))},
                              timeout=60)
    assert elsewhere.status_code == 413
    # Declaring more than MAX_UPLOAD_BYTES is answered 413 before a byte of the body is read.
    address = urlparse(live_asgi)
    with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
        conn.sendall(f"POST {URL} HTTP/1.1\r\nHost: {address.hostname}\r\nContent-Type: multipart/form-data; "
                     f"boundary=x\r\nContent-Length: {3 * 2**30}\r\n\r\n".encode())
        assert b" 413 " in conn.recv(200).split(b"\r\n")[0]
