"""Comparisons run by a real `inference` worker process (threads sharing one model cache and
batcher, as production runs it) on the tiny model and a LoRA adapter of it."""

import pytest

from apps.comparison.models import Comparison, Output
from apps.registry.services import run_inspection
from tests.conftest import wait_for
from tests.training.fixtures import QA, make_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def ended(client, comparison_id, timeout=180) -> dict:
    def check():
        body = client.get(f"/api/comparisons/{comparison_id}/").json()
        return body if body["state"] in ("succeeded", "failed", "cancelled") else None
    return wait_for(check, timeout=timeout, interval=0.2, what=f"comparison {comparison_id} to end")


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_base_model_and_its_adapter_answer_every_sampled_prompt_with_scores(client, scientist, project, owner,
                                                                              tiny_model, adapter_model,
                                                                              inference_worker):
    version = make_version(project, owner)
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/comparisons/", {
        "name": "Base vs adapter", "models": [tiny_model.pk, adapter_model.pk], "dataset_version": version.pk,
        "split": "validation", "sample_size": 5, "seed": 3, "params": {"max_new_tokens": 6}},
        content_type="application/json")
    assert response.status_code == 201, response.content
    comparison = ended(client, response.json()["id"])
    assert comparison["state"] == "succeeded", comparison["error"]
    assert comparison["cells_done"] == comparison["cells_total"] == 10

    grid = client.get(f"/api/comparisons/{comparison['id']}/grid/").json()
    assert len(grid["cells"]) == 10 and not any(c["error"] for c in grid["cells"])
    references = {p["id"]: p["reference"] for p in grid["prompts"]}
    assert set(references.values()) <= {r for _, r in QA}
    for cell in grid["cells"]:
        assert cell["completion_tokens"] >= 1 and cell["latency_s"] > 0 and cell["tokens_per_s"] > 0
        assert set(cell["scores"]) >= {"exact_match", "rouge_l", "perplexity"}
    by_model = {}
    for cell in grid["cells"]:
        by_model.setdefault(cell["contestant"], []).append(cell["text"])
    base_texts, adapter_texts = by_model.values()
    assert base_texts != adapter_texts  # the adapter answers differently
    summaries = {s["contestant"]: s for s in grid["summaries"]}
    assert all(s["perplexity"] > 1 and 0 <= s["rouge_l"] <= 1 for s in summaries.values())

    # a message for a comparison that already ran does nothing
    from apps.comparison.tasks import compare_task

    compare_task.apply_async(args=[comparison["id"]], queue="inference")
    assert Output.objects.filter(comparison_id=comparison["id"]).count() == 10


def test_a_running_comparison_cancelled_stops_after_its_current_batch(client, scientist, project, tiny_model,
                                                                      inference_worker):
    client.force_login(scientist)
    second = client.post(f"/api/projects/{project.pk}/models/", {"name": "Tiny again", "path": tiny_model.source_path},
                         content_type="application/json")
    assert second.status_code == 201, second.content
    run_inspection(second.json()["id"])  # what the default worker does (only an inference worker runs here)
    prompts = [" ".join(["what is the capital of france ?"] * (1 + i % 3)) for i in range(320)]
    response = client.post(f"/api/projects/{project.pk}/comparisons/", {
        "name": "Long", "models": [tiny_model.pk, second.json()["id"]], "prompts": prompts,
        "params": {"max_new_tokens": 60, "temperature": 1.0, "seed": 1}}, content_type="application/json")
    comparison_id = response.json()["id"]
    wait_for(lambda: Comparison.objects.get(pk=comparison_id).cells_done >= 32, timeout=120, interval=0.05,
             what="the first batch")
    assert client.post(f"/api/comparisons/{comparison_id}/cancel/").json()["cancel_requested"]
    comparison = ended(client, comparison_id)
    assert comparison["state"] == "cancelled"
    done = Output.objects.filter(comparison_id=comparison_id).count()
    assert 32 <= done < 640 and done % 32 == 0 and comparison["cells_done"] == done


def test_the_reaper_resends_a_comparison_whose_worker_vanished_and_a_worker_finishes_it(client, scientist, project,
                                                                                      owner, tiny_model,
                                                                                      inference_worker):
    from apps.core.jobs import reap_stale
    from tests.comparison.test_runner import orphaned_comparison

    comparison = orphaned_comparison(project, owner, tiny_model)
    assert reap_stale()["comparison.Comparison"] == 1
    client.force_login(scientist)
    body = ended(client, comparison.pk)
    assert body["state"] == "succeeded", body["error"]
    assert body["runs"] == 2 and body["worker"].startswith("test-inference")
    texts = list(Output.objects.filter(comparison=comparison).order_by("prompt__position").values_list("text",
                                                                                                        flat=True))
    assert len(texts) == 3 and texts[0] == "stored before"  # the stored cell was kept, the rest made
    assert reap_stale()["comparison.Comparison"] == 0
