"""An export's file leaves the disk with the export, and with its model; a file that cannot be
removed is logged and does not hold the deletion up."""

import logging

import pytest

from apps.projects.models import AuditEvent
from apps.registry.exports import export_folder
from apps.registry.models import ModelExport, RegisteredModel
from tests.conftest import wait_for


def finished_export(client, model) -> dict:
    answer = client.post(f"/api/models/{model.pk}/exports/", {"format": "safetensors"},
                         content_type="application/json")
    assert answer.status_code == 202, answer.content
    url = f"/api/model-exports/{answer.json()['id']}/"
    job = wait_for(lambda: (body := client.get(url).json())["state"] in ("succeeded", "failed") and body,
                   timeout=120, interval=0.3, what="the export")
    assert job["state"] == "succeeded", job["error"]
    return job


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_deleting_an_export_or_its_model_removes_the_written_files(client, scientist, owner, tiny_model,
                                                                   celery_worker):
    client.force_login(scientist)
    first = finished_export(client, tiny_model)
    folder = export_folder(first["id"])
    assert [path.suffix for path in folder.iterdir()] == [".zip"]

    assert client.delete(f"/api/model-exports/{first['id']}/").status_code == 204
    assert not folder.exists() and not ModelExport.objects.filter(pk=first["id"]).exists()
    assert AuditEvent.objects.filter(action="model.export_delete").count() == 1
    assert client.get(f"/api/model-exports/{first['id']}/").status_code == 404

    second = finished_export(client, tiny_model)
    assert export_folder(second["id"]).is_dir()
    client.force_login(owner)  # model.delete is the owner's
    assert client.delete(f"/api/models/{tiny_model.pk}/").status_code == 204
    assert not export_folder(second["id"]).exists() and not ModelExport.objects.filter(pk=second["id"]).exists()


@pytest.mark.django_db(transaction=True)
def test_an_export_still_running_is_not_deleted_and_the_refusal_names_the_state(client, scientist, viewer, tiny_model):
    running = ModelExport.objects.create(model=tiny_model, format="gguf-f16", state="running")
    client.force_login(viewer)  # may see the model, not its exports
    assert client.delete(f"/api/model-exports/{running.pk}/").status_code == 403
    client.force_login(scientist)
    refused = client.delete(f"/api/model-exports/{running.pk}/")
    assert refused.status_code == 409 and refused.json()["field"] == "state"
    assert ModelExport.objects.filter(pk=running.pk).exists()
    assert not AuditEvent.objects.filter(action="model.export_delete").exists()


@pytest.mark.django_db(transaction=True)
def test_a_file_that_cannot_be_removed_is_logged_and_the_model_is_deleted_anyway(client, owner, tiny_model, caplog):
    stuck = ModelExport.objects.create(model=tiny_model, format="gguf-f16", state="succeeded")
    gone = ModelExport.objects.create(model=tiny_model, format="gguf-q8_0", state="succeeded")
    # A plain file where the export's folder should be: removing it as a folder fails for real.
    export_folder(stuck.pk).parent.mkdir(parents=True, exist_ok=True)
    export_folder(stuck.pk).write_bytes(b"GGUF")
    export_folder(gone.pk).mkdir(parents=True)
    (export_folder(gone.pk) / "model-q8_0.gguf").write_bytes(b"GGUF")
    client.force_login(owner)
    with caplog.at_level(logging.ERROR, logger="apps.registry.exports"):
        assert client.delete(f"/api/models/{tiny_model.pk}/").status_code == 204
    assert RegisteredModel.all_objects.get(pk=tiny_model.pk).deleted_at is not None
    assert not ModelExport.objects.filter(model=tiny_model).exists()
    assert not export_folder(gone.pk).exists()  # the failure of one did not stop the others
    assert f"could not delete the files of model export {stuck.pk}" in caplog.text
    export_folder(stuck.pk).unlink()


@pytest.mark.django_db
def test_the_model_pages_delete_button_checks_who_and_what_like_the_api(client, scientist, viewer, outsider, project,
                                                                       tiny_model, owner):
    from tests.serving.fixtures import ready

    failed = ModelExport.objects.create(model=tiny_model, format="safetensors", state="failed", error="disk full")
    running = ModelExport.objects.create(model=tiny_model, format="gguf-f16", state="running")
    other_model = ready(project, "Other")

    def delete(export, model=tiny_model, project_id=project.pk):
        return client.post(f"/projects/{project_id}/models/{model.pk}/exports/{export.pk}/delete/")

    client.force_login(outsider)  # another project's member: nothing exists
    assert delete(failed).status_code == 404
    client.force_login(viewer)  # may see the model, not its exports
    assert delete(failed).status_code == 403
    client.force_login(scientist)
    assert client.get(f"/projects/{project.pk}/models/{tiny_model.pk}/exports/{failed.pk}/delete/").status_code == 405
    assert delete(failed, model=other_model).status_code == 404  # an export of another model
    assert client.post(f"/projects/{project.pk}/models/{tiny_model.pk}/exports/999999/delete/").status_code == 404
    refused = delete(running)
    assert refused.status_code == 302
    assert "This export is running; delete it once it has ended." in client.get(refused["Location"]).content.decode()
    assert ModelExport.objects.filter(pk=running.pk).exists()
    assert not AuditEvent.objects.filter(action="model.export_delete").exists()
    assert delete(failed).status_code == 302
    assert not ModelExport.objects.filter(pk=failed.pk).exists()
    assert AuditEvent.objects.get(action="model.export_delete").actor == scientist
