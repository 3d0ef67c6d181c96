"""The inference engine's figures per model and adapter (#18 item 8) through the whole stack: the
official `openai` client against the live server, a real `inference` worker generating with the
tiny model and an adapter beside it, then /metrics scraped and its histograms checked against the
generation rows. Also the series cap and the quantiles the monitoring page shows, on their own."""

from pathlib import Path

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from apps.monitoring import engine_metrics, selectors
from apps.serving.models import Generation
from tests.serving.fixtures import alias_family_fixture  # noqa: F401
from tests.serving.test_openai_api import project_token, register_adapter

TOKEN = "m" * 40


def scrape(url: str, **headers) -> list:
    response = requests.get(f"{url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.status_code
    return list(text_string_to_metric_families(response.text))


def values(families, model: str, adapter: str | None = None) -> dict[str, float]:
    """Sample name (with `le` for buckets, `part`/`resource` where given) -> value, for one model
    (and adapter), summed over workers."""
    found: dict[str, float] = {}
    for family in families:
        if not family.name.startswith("workbench_inference_"):
            continue  # the per-version serving figures (from the rows) have a model label too
        for s in family.samples:
            if s.labels.get("model") != model or (adapter is not None and s.labels.get("adapter", adapter) != adapter):
                continue
            extra = next((s.labels[k] for k in ("le", "part", "resource") if k in s.labels), None)
            key = s.name if extra is None else f"{s.name}[{extra}]"
            found[key] = found.get(key, 0) + s.value
            assert s.labels["worker"].startswith("test-inference-"), s.labels
    return found


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_generations_move_the_histograms_of_their_model_and_adapter(owner, project, tiny_model, inference_worker,
                                                                    live_asgi, settings):
    settings.METRICS_TOKEN = TOKEN
    adapter = register_adapter(tiny_model, owner, seed=3, target_modules=["q_proj", "v_proj"])
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=project_token(owner, project), max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "what is the capital of france ?"}]
    for max_tokens in (3, 6):
        api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=max_tokens, temperature=0)
    list(api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=5, stream=True))
    for max_tokens in (4, 7):
        api.completions.create(model=adapter.name, prompt="what is paris ?", max_tokens=max_tokens)

    families = scrape(live_asgi, Authorization=f"Bearer {TOKEN}")
    for model, adapter_label, requests_sent in ((tiny_model, "", 3), (adapter, adapter.name, 2)):
        rows = list(Generation.objects.filter(model=model, state="succeeded"))
        assert len(rows) == requests_sent
        got = values(families, tiny_model.name, adapter_label)
        assert got["workbench_inference_requests_total"] == requests_sent
        assert got["workbench_inference_ttft_seconds_count"] == requests_sent
        assert got["workbench_inference_queue_wait_seconds_count"] == requests_sent
        assert got["workbench_inference_tokens_total"] == sum(r.completion_tokens for r in rows)
        assert got["workbench_inference_inter_token_seconds_count"] == sum(r.completion_tokens - 1 for r in rows)
        # The engine's own times: the TTFT histogram sums what the rows recorded; queue waits come
        # before first tokens; every gap falls within its request's time.
        assert got["workbench_inference_ttft_seconds_sum"] == pytest.approx(
            sum(r.time_to_first_token_s for r in rows), rel=1e-3)
        assert 0 <= got["workbench_inference_queue_wait_seconds_sum"] < got["workbench_inference_ttft_seconds_sum"]
        assert 0 < got["workbench_inference_inter_token_seconds_sum"] < sum(r.total_s for r in rows)
        assert got["workbench_inference_ttft_seconds_bucket[+Inf]"] == requests_sent
    batch = values(families, tiny_model.name)
    assert batch["workbench_inference_batch_occupancy_ratio_count[rows]"] > 0
    assert 0 < batch["workbench_inference_batch_occupancy_ratio_sum[rows]"] <= batch[
        "workbench_inference_batch_occupancy_ratio_count[rows]"]
    assert batch["workbench_inference_model_memory_bytes[base]"] > 0
    assert batch["workbench_inference_model_memory_bytes[adapters]"] > 0  # the adapter stays loaded beside it
    assert batch["workbench_inference_kv_cache_bytes"] == 0  # nothing runs now
    assert 0 < batch["workbench_inference_busy_seconds_total"] < sum(
        r.total_s for r in Generation.objects.filter(model__in=[tiny_model, adapter]))

    # What the monitoring page shows, from the same published figures.
    lines = {(line["model"], line["adapter"]): line for line in selectors.inference_figures()["lines"]}
    base_line = lines[(tiny_model.name, "")]
    assert base_line["requests"] == 3 and base_line["ttft_p50_s"] > 0
    assert base_line["tokens_per_s"] > 0 and base_line["stream_tokens_per_s"] > 0
    assert base_line["memory_bytes"] > 0 and 0 < base_line["occupancy"] <= 1
    assert lines[(tiny_model.name, adapter.name)]["requests"] == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_only_a_metrics_reader_gets_the_engine_figures(owner, scientist, project, tiny_model, inference_worker,
                                                       live_asgi, settings):
    settings.METRICS_TOKEN = TOKEN
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=project_token(owner, project), max_retries=0, timeout=60)
    api.completions.create(model=tiny_model.name, prompt="what is paris ?", max_tokens=3)
    assert requests.get(f"{live_asgi}/metrics", timeout=30).status_code == 404
    assert requests.get(f"{live_asgi}/metrics", headers={"Authorization": "Bearer " + "x" * 40},
                        timeout=30).status_code == 404
    # A project's own API token is no metrics token, whatever it may do in its project.
    assert requests.get(f"{live_asgi}/metrics", headers={"Authorization": "Bearer " + project_token(owner, project)},
                        timeout=30).status_code == 404
    assert values(scrape(live_asgi, Authorization=f"Bearer {TOKEN}"), tiny_model.name, "")[
        "workbench_inference_requests_total"] == 1


def test_pairs_beyond_the_cap_count_as_other():
    observer = engine_metrics.EngineObserver(max_series=2)
    for i in range(4):
        observer.name("model-1", "Base", f"/adapters/{i}", f"Tuned {i}")
        observer.finished("model-1", f"/adapters/{i}", tokens=5, reason="stop")
    lines = {(line["model"], line["adapter"]): line["requests"]
             for line in engine_metrics.lines(engine_metrics.families({"w1": observer.exposition()}))}
    assert lines == {("Base", "Tuned 0"): 1, ("Base", "Tuned 1"): 1, ("other", "other"): 2}


def test_two_workers_figures_are_kept_apart_on_metrics_and_summed_on_the_page():
    texts = {}
    for worker, gaps in (("w1", (0.01, 0.03)), ("w2", (0.05,))):
        observer = engine_metrics.EngineObserver(max_series=10)
        observer.name("model-1", "Base", None, "Base")
        observer.first_token("model-1", None, 0.2)
        for gap in gaps:
            observer.next_token("model-1", None, gap)
        observer.finished("model-1", None, tokens=len(gaps) + 1, reason="length")
        observer.step("model-1", rows=1, max_rows=4, tokens=10, token_budget=100, kv_cache_bytes=0, seconds=0.5)
        texts[worker] = observer.exposition()
    families = engine_metrics.families(texts)
    counts = {s.labels["worker"]: s.value for f in families for s in f.samples
              if s.name == "workbench_inference_requests_total"}
    assert counts == {"w1": 1, "w2": 1}
    [line] = engine_metrics.lines(families)
    assert (line["model"], line["adapter"], line["requests"], line["tokens"]) == ("Base", "", 2, 5)
    assert line["stream_tokens_per_s"] == pytest.approx(3 / 0.09, abs=0.01)  # 3 gaps in 0.09 s
    assert line["tokens_per_s"] == 5.0  # 5 tokens in the 1 s the batches were busy
    assert line["occupancy"] == 0.25
    assert 0.1 < line["ttft_p50_s"] <= 0.25  # within the bucket (0.1, 0.25] every observation fell in


def test_quantiles_interpolate_within_their_bucket():
    buckets = {0.1: 2.0, 0.5: 6.0, 1.0: 8.0, float("inf"): 8.0}
    assert engine_metrics.histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * (4 - 2) / 4)
    assert engine_metrics.histogram_quantile(0.25, buckets) == pytest.approx(0.1)
    assert engine_metrics.histogram_quantile(0.99, {0.1: 0.0, float("inf"): 3.0}) == 0.1
    assert engine_metrics.histogram_quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None


def test_a_garbled_worker_text_leaves_out_that_worker_only():
    observer = engine_metrics.EngineObserver(max_series=10)
    observer.name("model-1", "Base", None, "Base")
    observer.finished("model-1", None, tokens=3, reason="stop")
    families = engine_metrics.families({"good": observer.exposition(),
                                        "bad": "workbench_inference_requests_total{model=\"x\" 1\n\x00\xff"})
    assert {s.labels["worker"] for f in families for s in f.samples} == {"good"}
    assert [line["requests"] for line in engine_metrics.lines(families)] == [1]


@pytest.mark.django_db
def test_metrics_still_answers_when_a_worker_published_garbage(client, settings):
    from apps.monitoring import redis_store

    settings.METRICS_TOKEN = TOKEN
    redis_store.client().set(engine_metrics.KEY + "garbled@host", "not {a metric", ex=30)
    try:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        assert b"garbled@host" not in response.content
    finally:
        redis_store.client().delete(engine_metrics.KEY + "garbled@host")


@pytest.mark.django_db
def test_every_caller_of_the_batcher_names_its_model_and_adapter(family):
    """Playground, API, comparisons, evaluations and suggestions all key the batcher through
    runner.engine_key, which names the labels: nobody's rows count as "other"."""
    from apps.serving.runner import engine_key

    base, v1, _ = family
    observer = engine_metrics.observer()
    # The adapter's directory on this machine (apps.registry.weights.model_paths: a bucket copy's may differ).
    for model, adapter in ((base, None), (v1, Path("/cache/weights-cache/support-v1"))):
        observer.finished(engine_key(model, adapter), str(adapter) if adapter else None, tokens=2, reason="stop")
    lines = {(line["model"], line["adapter"]): line["requests"]
             for line in engine_metrics.lines(engine_metrics.families({"here": observer.exposition()}))}
    assert lines[("Support", "")] == 1 and lines[("Support", "Support v1")] == 1
    assert ("other", "other") not in lines


@pytest.mark.django_db
def test_the_page_shows_the_figures_to_site_staff_only(client, staff, scientist, no_workers):
    from apps.monitoring import redis_store

    observer = engine_metrics.EngineObserver(max_series=10)
    observer.name("model-1", "Page model", None, "Page model")
    observer.first_token("model-1", None, 0.3)
    observer.finished("model-1", None, tokens=4, reason="stop")
    redis_store.client().set(engine_metrics.KEY + "page@host", observer.exposition(), ex=30)
    try:
        client.force_login(scientist)  # a project member, not site staff
        refused = client.get("/monitoring/")
        assert refused.status_code == 404 and b"Page model" not in refused.content
        client.force_login(staff)
        page = client.get("/monitoring/")
        assert page.status_code == 200
        [line] = [line for line in page.context["snapshot"]["inference"]["lines"] if line["model"] == "Page model"]
        assert (line["requests"], line["tokens"]) == (1, 4) and 0.25 < line["ttft_p50_s"] <= 0.5
        assert b"Serving engine" in page.content
    finally:
        redis_store.client().delete(engine_metrics.KEY + "page@host")
