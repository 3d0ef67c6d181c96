"""The queue's requests use a fixed number of SQL queries, whatever the campaign's size or how
much of it is done (what keeps next/submit flat from 10k to 1M examples)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.datasets.models import Dataset
from apps.datasets.writer import write_version
from tests.annotation.fixtures import answer, make_campaign, next_item, review_records, submit

pytestmark = pytest.mark.django_db


def cycle_queries(client, campaign) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as next_queries:
        item = next_item(client, campaign).json()
    with CaptureQueriesContext(connection) as submit_queries:
        assert submit(client, campaign, item["id"], answer()).status_code == 201
    return len(next_queries), len(submit_queries)


def cycle_sql(client, campaign) -> list[dict]:
    with CaptureQueriesContext(connection) as queries:
        item = next_item(client, campaign).json()
        assert submit(client, campaign, item["id"], answer()).status_code == 201
    return queries.captured_queries


def test_next_and_submit_queries_do_not_grow_with_the_campaign(client, scientist, annotator, project, owner):
    counts = []
    for size in (5, 300):
        version = write_version(dataset=Dataset.objects.create(project=project, name=f"D{size}", created_by=owner),
                                records=review_records(size),
                                roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})
        client.force_login(scientist)
        campaign = make_campaign(client, project, version)
        client.force_login(annotator)
        cycle_queries(client, campaign)  # warm: session, permissions
        counts.append([cycle_queries(client, campaign) for _ in range(3)])
    small, large = counts
    assert small == large, counts
    next_count, submit_count = small[-1]
    print(f"\nnext: {next_count} queries, submit: {submit_count} queries")
    # With savepoints; the session comes from the cache, the user and their permissions from the
    # process's principal cache (apps/core/principal_cache.py).
    assert next_count <= 9 and submit_count <= 13
    assert not any("django_session" in q["sql"] for q in cycle_sql(client, campaign))


def test_the_review_queue_reads_every_items_answers_in_one_query(client, scientist, annotator, second_annotator,
                                                                 project, owner):
    version = write_version(dataset=Dataset.objects.create(project=project, name="R", created_by=owner),
                            records=review_records(12),
                            roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})
    client.force_login(scientist)
    campaign = make_campaign(client, project, version, overlap=2)
    counts = []
    for user, answers in ((annotator, 3), (second_annotator, 9)):
        client.force_login(user)
        for _ in range(answers):
            item = next_item(client, campaign).json()
            assert submit(client, campaign, item["id"], answer()).status_code == 201
        client.force_login(scientist)
        with CaptureQueriesContext(connection) as queries:
            page = client.get(f"/api/campaigns/{campaign['id']}/review/").json()
        counts.append(len(queries))
    assert len(page["results"]) == 12 and all(len(i["annotations"]) == 1 for i in page["results"])
    assert counts[0] == counts[1], counts  # 3 answered items, then 12: the same queries
