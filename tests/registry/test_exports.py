"""Exports for deployment through the API and a real worker: an adapter merged into its base and
written as GGUF (f16, q8_0) or a zipped safetensors model, loaded back and checked, downloaded."""

import io
import zipfile

import pytest

from apps.registry.models import ModelExport, RegisteredModel
from tests.conftest import wait_for
from tests.registry.test_merge import register_adapter


def names_field(answer, field: str) -> bool:
    """A refusal names its field: the service's {"detail", "field"} or the serializer's {field: [...]}."""
    body = answer.json()
    return body.get("field") == field or field in body


@pytest.mark.django_db
@pytest.mark.timeout(180)
def test_who_may_export_and_what_is_refused(client, scientist, viewer, outsider, owner, tiny_model, other_project):
    adapter = register_adapter(tiny_model, owner)
    url = f"/api/models/{adapter.pk}/exports/"
    client.force_login(viewer)  # may see the model, not carry its weights away
    assert client.post(url, {"format": "gguf-f16"}, content_type="application/json").status_code == 403
    assert client.get(url).status_code == 403
    client.force_login(outsider)
    assert client.post(url, {"format": "gguf-f16"}, content_type="application/json").status_code == 404
    client.force_login(scientist)
    for body in ({"format": "gguf-q4"}, {}, {"format": ["gguf-f16"]}, {"format": 16}, {"format": "x" * 10_000},
                 {"format": "gguf-f16\x00; rm -rf /"}):
        answer = client.post(url, body, content_type="application/json")
        assert answer.status_code == 400 and names_field(answer, "format"), (body, answer.content)
    malformed = client.post(url, "{not json", content_type="application/json")
    assert malformed.status_code == 400
    # Another architecture: GGUF is refused with the reason, safetensors is not.
    RegisteredModel.objects.filter(pk__in=[adapter.pk, tiny_model.pk]).update(
        info={**tiny_model.info, "model_type": "gpt2", "architecture": "GPT2LMHeadModel"})
    refused = client.post(url, {"format": "gguf-q8_0"}, content_type="application/json")
    assert refused.status_code == 400 and refused.json()["field"] == "format"
    assert "GGUF export writes Llama-architecture models" in refused.json()["detail"] and "gpt2" in \
        refused.json()["detail"]
    RegisteredModel.objects.filter(pk=adapter.pk).update(status="converting")
    not_ready = client.post(url, {"format": "safetensors"}, content_type="application/json")
    assert not_ready.status_code == 400 and not_ready.json()["field"] == "model"
    assert ModelExport.objects.count() == 0
    # Another project's export answers 404, as its model does; an unfinished one is not downloaded.
    theirs = RegisteredModel.objects.create(project=other_project, name="Theirs", format="hf_dir", source_path="/t",
                                            weights_path="/t", status="ready", info=tiny_model.info)
    their_export = ModelExport.objects.create(model=theirs, format="gguf-f16")
    assert client.get(f"/api/model-exports/{their_export.pk}/").status_code == 404
    assert client.get(f"/api/model-exports/{their_export.pk}/download/").status_code == 404
    mine = ModelExport.objects.create(model=tiny_model, format="gguf-f16")
    early = client.get(f"/api/model-exports/{mine.pk}/download/")
    assert early.status_code == 400 and early.json()["field"] == "state"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_adapter_exported_as_gguf_and_safetensors_is_checked_and_downloadable(client, scientist, owner, tiny_model,
                                                                                celery_worker, tmp_path):
    from gguf import GGUFReader

    adapter = register_adapter(tiny_model, owner)
    client.force_login(scientist)
    started = {}
    for export_format in ("gguf-f16", "gguf-q8_0", "safetensors"):
        answer = client.post(f"/api/models/{adapter.pk}/exports/", {"format": export_format},
                             content_type="application/json")
        assert answer.status_code == 202, answer.content
        assert answer.json()["state"] == "queued" and answer.json()["download"] is None
        started[export_format] = answer.json()["id"]

    def finished():
        jobs = [client.get(f"/api/model-exports/{pk}/").json() for pk in started.values()]
        return all(job["state"] in ("succeeded", "failed") for job in jobs) and jobs

    jobs = dict(zip(started, wait_for(finished, timeout=240, interval=0.5, what="the exports")))
    for export_format, job in jobs.items():
        assert job["state"] == "succeeded", (export_format, job["error"])
        assert job["steps_done"] == job["steps_total"] == 3 and job["write_seconds"] > 0
        assert job["check"]["tokens_compared"] > 0 and 0 <= job["check"]["agreement"] <= 1
    assert jobs["gguf-f16"]["check"]["agreement"] >= 0.9 and jobs["gguf-q8_0"]["check"]["agreement"] >= 0.75
    assert jobs["safetensors"]["check"]["identical"] is True  # the merge computes base + adapter
    assert "GGUF loader" in jobs["gguf-f16"]["check"]["method"]

    download = client.get(jobs["gguf-q8_0"]["download"])
    assert download.status_code == 200 and "Run_adapter-q8_0.gguf" in download["Content-Disposition"]
    body = b"".join(download.streaming_content)
    assert body[:4] == b"GGUF" and len(body) == jobs["gguf-q8_0"]["size_bytes"]
    (tmp_path / "downloaded.gguf").write_bytes(body)
    reader = GGUFReader(tmp_path / "downloaded.gguf")
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["general.name"].contents() == "Run adapter"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(client.get(jobs["safetensors"]["download"]).streaming_content)))
    assert {"Run_adapter-merged/model.safetensors", "Run_adapter-merged/config.json",
            "Run_adapter-merged/tokenizer.json"} <= set(archive.namelist())

    listed = client.get(f"/api/models/{adapter.pk}/exports/").json()["results"]
    assert [job["id"] for job in listed] == sorted(started.values(), reverse=True)
    page = client.get(f"/projects/{adapter.project_id}/models/{adapter.pk}/").content.decode()
    assert "Run_adapter-q8_0.gguf" in page and page.count('data-testid="export-check"') == 3
