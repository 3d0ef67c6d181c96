"""Token-length histograms of a version with a registered model's tokenizer, counted by a worker."""

import pytest

from apps.datasets.models import Dataset, DeriveJob
from apps.datasets.writer import write_version
from tests.conftest import wait_for


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_viewer_counts_tokens_with_a_models_tokenizer_and_sees_the_histograms(client, viewer, owner, project,
                                                                              tiny_model, celery_worker):
    records = [{"prompt": "what is the capital of france ?", "response": "paris"},
               {"prompt": "paris", "response": "the capital of france"},
               {"messages": [{"role": "user", "content": "what is paris ?"},
                             {"role": "assistant", "content": "the capital of france"}]}]
    dataset = Dataset.objects.create(project=project, name="QA", created_by=owner)
    version = write_version(dataset=dataset, records=records, author=owner,
                            roles={"prompt": "prompt", "response": "response", "messages": "messages"})
    client.force_login(viewer)
    url = f"/projects/{project.pk}/datasets/{dataset.pk}/versions/{version.number}/stats/"
    bad = client.post(url, {"model": "999999"}, follow=True)
    assert "No such model in this project" in bad.content.decode() and not DeriveJob.objects.exists()
    assert client.post(url, {"model": tiny_model.pk}).status_code == 302
    job = wait_for(lambda: (j := DeriveJob.objects.get()).state in ("succeeded", "failed") and j, timeout=60,
                   what="the token count")
    assert job.state == "succeeded", job.error
    result = job.result
    assert result["rows"] == 3 and sum(result["histograms"]["total"]) == 3
    # The word-level tiny tokenizer: one token per word.
    assert result["longest"] == {"prompt": 7, "response": 4, "total": 8}
    page = client.get(url).content.decode()
    assert f"With the tokenizer of {tiny_model.name}" in page and 'id="chart-tokens"' in page
