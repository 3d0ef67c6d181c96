"""Merging a fine-tune's adapter into a standalone model version through the API and a real worker."""

import pytest
from django.conf import settings

from apps.registry.models import RegisteredModel
from tests.conftest import wait_for
from tests.workers.test_models_merge import logits, save_adapter
from workers.models import load_for_inference


def register_adapter(tiny_model, owner) -> RegisteredModel:
    adapter_dir = settings.MODEL_ROOTS[0] / f"adapter-{tiny_model.pk}"
    save_adapter(tiny_model.weights_path, adapter_dir)
    return RegisteredModel.objects.create(
        project=tiny_model.project, name="Run adapter", kind="adapter", base_model=tiny_model, format="peft",
        source_path=str(adapter_dir), weights_path=str(adapter_dir), status="ready", info=tiny_model.info,
        lineage={"job": 1, "content_hash": "c" * 64}, created_by=owner)


@pytest.mark.django_db
def test_who_may_merge_and_what(client, scientist, viewer, outsider, owner, tiny_model):
    adapter = register_adapter(tiny_model, owner)
    url = f"/api/models/{adapter.pk}/merge/"
    client.force_login(viewer)
    assert client.post(url, {}, content_type="application/json").status_code == 403
    client.force_login(outsider)
    assert client.post(url, {}, content_type="application/json").status_code == 404
    client.force_login(scientist)
    base = client.post(f"/api/models/{tiny_model.pk}/merge/", {}, content_type="application/json")
    assert base.status_code == 400 and base.json()["field"] == "model"
    taken = client.post(url, {"name": tiny_model.name}, content_type="application/json")
    assert taken.status_code == 400 and taken.json()["field"] == "name"
    assert RegisteredModel.objects.count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_merged_model_is_a_ready_base_model_that_computes_base_plus_adapter(client, scientist, owner, tiny_model,
                                                                            celery_worker):
    from peft import PeftModel

    adapter = register_adapter(tiny_model, owner)
    client.force_login(scientist)
    response = client.post(f"/api/models/{adapter.pk}/merge/", {"name": "Merged run"},
                           content_type="application/json")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "converting"
    model_id = response.json()["id"]
    merged = wait_for(lambda: (m := RegisteredModel.objects.get(pk=model_id)).status != "converting" and m,
                      timeout=60, what="the merge")
    assert merged.status == "ready", merged.error
    assert merged.kind == "base" and merged.lineage["merged_from"] == adapter.pk
    assert merged.lineage["content_hash"] == "c" * 64 and merged.info["parameters"] == tiny_model.info["parameters"]
    ids = [2, 7, 8, 9, 10]
    base, _ = load_for_inference(tiny_model.weights_path)
    expected = logits(PeftModel.from_pretrained(base, adapter.weights_path), ids)
    got = logits(load_for_inference(merged.weights_path)[0], ids)
    assert (got - expected).abs().max().item() < 1e-4
    page = client.get(f"/projects/{merged.project_id}/models/{merged.pk}/").content.decode()
    assert "Merged from the adapter “Run adapter”" in page


@pytest.mark.django_db
def test_the_adapter_page_offers_the_merge_to_those_who_may_register_models(client, scientist, viewer, owner,
                                                                          tiny_model):
    adapter = register_adapter(tiny_model, owner)
    page_url = f"/projects/{adapter.project_id}/models/{adapter.pk}/"
    client.force_login(viewer)
    assert "Merge into a standalone model" not in client.get(page_url).content.decode()
    client.force_login(scientist)
    assert "Merge into a standalone model" in client.get(page_url).content.decode()
    response = client.post(f"{page_url}merge/", {"name": ""})
    merged = RegisteredModel.objects.get(lineage__merged_from=adapter.pk)
    assert response.status_code == 302 and response["Location"].endswith(f"/models/{merged.pk}/")
    assert merged.name == "Run adapter (merged)" and merged.status == "converting"
