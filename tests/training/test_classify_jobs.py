"""Classifier jobs: launched through the API on a version's label column (what a classification
campaign's export writes), refused with a 400 naming the field when the labels cannot make a
classifier, and run by a real worker into an adapter that carries its head and classes."""

import random

import pytest

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.registry.models import RegisteredModel
from apps.training.models import MetricPoint, TrainingJob
from tests.conftest import wait_for
from tests.training.fixtures import launch_body

FILLER = ["what", "is", "the", "capital", "of", "?"]
KEYWORDS = {"city": "paris", "country": "france"}


def keyword_records(count: int, seed: int) -> list[tuple[str, str]]:
    """(text, class): filler words of the tiny model's vocabulary with the class's keyword among them."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        label = rng.choice(sorted(KEYWORDS))
        words = rng.choices(FILLER, k=rng.randint(1, 3))
        words.insert(rng.randint(0, len(words)), KEYWORDS[label])
        records.append((" ".join(words), label))
    return records


def labelled_version(project, owner, train, evaluation=(), *, in_metadata: str = "") -> DatasetVersion:
    """Rows with a prompt and a class (the label column, or the metadata key `in_metadata`), no response."""
    dataset = Dataset.objects.create(project=project, name=f"Labels {Dataset.objects.count()}", created_by=owner)
    rows = [(text, label, "train") for text, label in train] + [(t, lab, "validation") for t, lab in evaluation]
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status="ready", author=owner,
                                            row_count=len(rows), content_hash="d" * 64)
    DatasetRow.objects.bulk_create([
        DatasetRow(version=version, position=i, row_hash=f"{i:064d}", prompt=text, split=split,
                   label=None if in_metadata else label, metadata={in_metadata: label} if in_metadata else {})
        for i, (text, label, split) in enumerate(rows)])
    return version


def classify_body(model, version, **config):
    return launch_body(model, version, **{"method": "classify", "sample_max_new_tokens": 4, **config})


@pytest.mark.django_db
@pytest.mark.parametrize("config, field, words", [
    ({}, "config.label_column", "no labels"),                                # the QA version has no labels
    ({"label_column": "annotation.topic"}, "config.label_column", "no labels"),
    ({"label_column": ""}, "config.label_column", "name the column"),
    ({"label_column": 7}, "config.label_column", "name the column"),
    ({"label_column": "x" * 201}, "config.label_column", "at most 200"),
    ({"class_labels": ["only"]}, "config.class_labels", "two distinct classes"),
    ({"class_labels": "a,b"}, "config.class_labels", "list of non-empty strings"),
    ({"format": "chat", "class_labels": ["a", "b"]}, "config.format", "prompt_response"),
])
def test_a_classifier_on_labels_that_cannot_make_one_is_refused_naming_the_field(
        client, scientist, project, tiny_model, qa_version, config, field, words):
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/jobs/", classify_body(tiny_model, qa_version, **config),
                           content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field and words in response.json()["detail"], response.json()
    assert not TrainingJob.objects.exists()


@pytest.mark.django_db
def test_one_class_or_a_missing_split_is_refused_and_a_metadata_column_is_read(client, scientist, owner, project,
                                                                               tiny_model):
    client.force_login(scientist)
    one_class = labelled_version(project, owner, [("what is paris ?", "city")] * 4)
    response = client.post(f"/api/projects/{project.pk}/jobs/", {**classify_body(tiny_model, one_class), "eval_split": ""},
                           content_type="application/json")
    assert response.status_code == 400
    assert response.json()["field"] == "config.label_column" and "only the class “city”" in response.json()["detail"]

    version = labelled_version(project, owner, keyword_records(8, seed=1), in_metadata="annotation.topic")
    body = {**classify_body(tiny_model, version, label_column="annotation.topic"), "eval_split": ""}
    missing = client.post(f"/api/projects/{project.pk}/jobs/", {**body, "train_split": "test"},
                          content_type="application/json")
    assert missing.status_code == 400 and missing.json()["field"] == "train_split"
    estimate = client.post(f"/api/projects/{project.pk}/jobs/estimate/", body, content_type="application/json")
    assert estimate.status_code == 200 and estimate.json()["examples"] == 8, estimate.content  # rows with a class
    launched = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json")
    assert launched.status_code == 201, launched.content
    job = TrainingJob.objects.get(pk=launched.json()["id"])
    assert job.method == "classify" and job.config["class_labels"] == ["city", "country"]
    assert job.config["sample_prompts"] == []  # a classifier generates nothing


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_classifier_job_learns_the_classes_and_registers_its_adapter(client, scientist, owner, project, tiny_model,
                                                                       celery_worker):
    version = labelled_version(project, owner, keyword_records(96, seed=1), keyword_records(24, seed=2))
    client.force_login(scientist)
    body = classify_body(tiny_model, version, max_steps=40, eval_every=20, batch_size=8, learning_rate=2e-2,
                         lora_r=8, lora_alpha=8, target_modules="all_linear", class_weights=True)
    response = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    def ended():
        job = client.get(f"/api/jobs/{job_id}/").json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(ended, timeout=180, interval=0.2, what="the classifier job")
    assert job["state"] == "succeeded", (job["error"], job["traceback"])
    evals = [p.values for p in MetricPoint.objects.filter(job_id=job_id, kind="eval").order_by("step")]
    assert [e["step"] for e in evals] == [0, 20, 40]
    assert evals[-1]["eval_accuracy"] >= 0.9 and evals[-1]["eval_macro_f1"] >= 0.9, evals
    assert len(evals[-1]["eval_confusion"]) == 2 and sum(map(sum, evals[-1]["eval_confusion"])) == 24
    steps = MetricPoint.objects.filter(job_id=job_id, kind="train").order_by("step").last().values
    assert {"accuracy", "macro_f1"} <= set(steps) and "confusion" not in steps
    adapter = RegisteredModel.objects.get(pk=job["adapter"])
    assert adapter.lineage["config"]["method"] == "classify"
    assert adapter.lineage["config"]["class_labels"] == ["city", "country"]


# --- multi-label: a column of lists of classes (what a multi-label annotation field exports) -------------

def multi_label_records(count: int, seed: int) -> list[tuple[str, list[str]]]:
    """(text, classes): filler words with none, one or both of the keywords among them."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        labels = sorted(rng.sample(sorted(KEYWORDS), rng.choice([0, 1, 1, 2])))
        words = rng.choices(FILLER, k=rng.randint(1, 3))
        for label in labels:
            words.insert(rng.randint(0, len(words)), KEYWORDS[label])
        records.append((" ".join(words), labels))
    return records


@pytest.mark.django_db
def test_a_column_of_lists_launches_a_multi_label_classifier_and_mixed_or_contrary_columns_are_refused(
        client, scientist, owner, project, tiny_model):
    client.force_login(scientist)
    url = f"/api/projects/{project.pk}/jobs/"
    mixed = labelled_version(project, owner, [("paris", ["city"]), ("france", "country"), ("x", ["country"])],
                             in_metadata="annotation.topics")
    response = client.post(url, {**classify_body(tiny_model, mixed, label_column="annotation.topics"),
                                 "eval_split": ""}, content_type="application/json")
    assert response.status_code == 400 and response.json()["field"] == "config.label_column"
    assert "both lists of classes and single classes (such as “country”)" in response.json()["detail"]

    single = labelled_version(project, owner, keyword_records(8, seed=1))
    contrary = client.post(url, {**classify_body(tiny_model, single, multi_label=True), "eval_split": ""},
                           content_type="application/json")
    assert contrary.status_code == 400 and contrary.json()["field"] == "config.multi_label"
    assert "one class per row" in contrary.json()["detail"]

    version = labelled_version(project, owner, multi_label_records(12, seed=1) + [("the of", [])],
                               in_metadata="annotation.topics")
    body = {**classify_body(tiny_model, version, label_column="annotation.topics"), "eval_split": ""}
    estimate = client.post(f"{url}estimate/", body, content_type="application/json")
    assert estimate.status_code == 200 and estimate.json()["examples"] == 13  # a row of no class is a row too
    launched = client.post(url, body, content_type="application/json")
    assert launched.status_code == 201, launched.content
    job = TrainingJob.objects.get(pk=launched.json()["id"])
    assert job.config["multi_label"] is True and job.config["class_labels"] == ["city", "country"]
    assert TrainingJob.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_multi_label_classifier_job_learns_each_class_serves_lists_and_suggests_a_multi_label_field(
        client, scientist, owner, annotator, project, tiny_model, celery_worker, inference_worker):
    from apps.annotation.models import Item
    from tests.annotation.fixtures import make_campaign, make_schema, next_item

    version = labelled_version(project, owner, multi_label_records(128, seed=1), multi_label_records(32, seed=2),
                               in_metadata="topics")
    client.force_login(scientist)
    body = classify_body(tiny_model, version, label_column="topics", max_steps=120, eval_every=60, batch_size=8,
                         learning_rate=2e-2, lora_r=8, lora_alpha=8, target_modules="all_linear", class_weights=True)
    response = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json")
    assert response.status_code == 201, response.content

    def ended(url):
        answer = client.get(url).json()
        return answer if answer["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(lambda: ended(f"/api/jobs/{response.json()['id']}/"), timeout=180, interval=0.2,
                   what="the multi-label classifier job")
    assert job["state"] == "succeeded", (job["error"], job["traceback"])
    evals = [p.values for p in MetricPoint.objects.filter(job_id=job["id"], kind="eval").order_by("step")]
    assert evals[-1]["eval_macro_f1"] >= 0.9 and evals[-1]["eval_accuracy"] >= 0.8, evals
    # one row per class: true positives, false positives, false negatives, true negatives over the 32 rows
    assert [sum(row) for row in evals[-1]["eval_confusion"]] == [32, 32]

    texts = ["paris", "france", "paris france", "the of ?"]
    posted = client.post(f"/api/models/{job['adapter']}/classify/", {"texts": texts}, content_type="application/json")
    assert posted.status_code == 202, posted.content
    answer = wait_for(lambda: ended(f"/api/classifications/{posted.json()['id']}/"), timeout=120, interval=0.2,
                      what="the classification")
    assert answer["state"] == "succeeded", answer["error"]
    assert [r["labels"] for r in answer["results"]] == [["city"], ["country"], ["city", "country"], []]
    for result in answer["results"]:  # each class on its own: they need not sum to one
        assert result["labels"] == [c for c in ("city", "country") if result["probabilities"][c] > 0.5]

    unlabelled = labelled_version(project, owner, [(text, []) for text in texts], in_metadata="topics")
    schema = make_schema(client, project, [{"name": "topics", "type": "multi_label", "labels": ["country", "city"]}])
    single = client.post(f"/api/projects/{project.pk}/label-schemas/", {"name": "One topic", "fields": [
        {"name": "topic", "type": "single_label", "labels": ["country", "city"]}]}, content_type="application/json").json()
    refused = client.post(f"/api/projects/{project.pk}/campaigns/",
                          {"name": "One", "dataset_version": unlabelled.pk, "schema": single["id"],
                           "suggestion_model": job["adapter"]}, content_type="application/json")
    assert refused.status_code == 400 and "no multi-label field" in refused.json()["detail"], refused.content
    campaign = make_campaign(client, project, unlabelled, schema=schema, suggestion_model=job["adapter"],
                             order="uncertain_first")
    state = wait_for(lambda: (c := client.get(f"/api/campaigns/{campaign['id']}/").json())["suggestion_state"]
                     in ("succeeded", "failed") and c, timeout=120, what="suggestions")
    assert state["suggestion_state"] == "succeeded", state["suggestion_progress"]
    items = {item.row.prompt: item for item in Item.objects.filter(campaign_id=campaign["id"]).select_related("row")}
    assert {text: item.suggestion["values"]["topics"] for text, item in items.items()} == {
        "paris": ["city"], "france": ["country"], "paris france": ["country", "city"], "the of ?": []}  # field order
    for item in items.values():
        probabilities = item.suggestion["probabilities"]
        assert item.confidence == pytest.approx(min(max(p, 1 - p) for p in probabilities.values()), abs=1e-5)
    client.force_login(annotator)
    least_sure = min(items.values(), key=lambda i: (i.confidence, i.position))
    assert next_item(client, campaign).json()["example"]["prompt"] == least_sure.row.prompt
