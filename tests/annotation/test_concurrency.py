"""50 annotators working one campaign at once through the live server: every submission is
kept exactly once, no item goes past its overlap, and no one annotates an item twice.

Real concurrent HTTP requests against the real database: on PostgreSQL (CI) this exercises the
row locks and SKIP LOCKED of the queue; on the embedded SQLite writes are serialised."""

import threading
import uuid
from collections import Counter

import pytest
import requests

from apps.accounts import services as account_services
from apps.annotation.models import Annotation, Campaign, Item
from apps.datasets.models import Dataset
from apps.datasets.writer import write_version
from tests.annotation.fixtures import make_campaign, review_records
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.slow]

ANNOTATORS = 50


@pytest.mark.parametrize("overlap, order", [(1, "default"), (2, "default"), (1, "uncertain_first")])
def test_fifty_annotators_at_once_lose_nothing_and_never_exceed_the_overlap(live_asgi, client, project, scientist,
                                                                            overlap, order):
    dataset = Dataset.objects.create(project=project, name="Many", created_by=scientist)
    version = write_version(dataset=dataset, records=review_records(120), author=scientist,
                            roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})
    client.force_login(scientist)
    campaign = make_campaign(client, project, version, overlap=overlap)
    if order == "uncertain_first":  # as a classifier's suggestions leave it: every other item, confidences mixed
        Campaign.objects.filter(pk=campaign["id"]).update(order=order)
        for item in Item.objects.filter(campaign_id=campaign["id"], position__lt=100)[::2]:
            Item.objects.filter(pk=item.pk).update(confidence=0.5 + (item.position * 37 % 100) / 200)
    tokens = []
    for n in range(ANNOTATORS):
        user = UserFactory(username=f"annotator{n}")
        MembershipFactory(project=project, user=user, role="annotator")
        _, raw = account_services.token_create(user=user, name="bench", project=None,
                                               permissions=["project.view", "annotation.submit"])
        tokens.append(raw)
    submitted: list[tuple[str, int]] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(ANNOTATORS)

    def work(raw_token: str) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {raw_token}"
        base = f"{live_asgi}/api/campaigns/{campaign['id']}"
        start.wait()
        for _ in range(6):
            response = session.post(f"{base}/next/", timeout=60)
            if response.status_code == 204:
                return
            if response.status_code != 200:
                with lock:
                    errors.append(f"next {response.status_code} {response.text[:200]}")
                return
            item = response.json()["id"]
            client_id = str(uuid.uuid4())
            body = {"client_id": client_id, "values": {"sentiment": "positive", "helpfulness": 3, "better": "A"}}
            answer = session.post(f"{base}/items/{item}/submit/", json=body, timeout=60)
            retry = session.post(f"{base}/items/{item}/submit/", json=body, timeout=60)  # a client retry
            with lock:
                if answer.status_code != 201 or retry.status_code != 200:
                    errors.append(f"submit {answer.status_code}/{retry.status_code} {answer.text[:200]}")
                else:
                    submitted.append((raw_token, item))

    threads = [threading.Thread(target=work, args=(raw,)) for raw in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert errors == []
    # 50 x 6 tries for 120 items x overlap (120 or 240 slots): demand exceeds supply, so the queue
    # runs dry and every slot is raced for.
    assert len(submitted) > 100 * overlap
    annotations = list(Annotation.objects.filter(item__campaign_id=campaign["id"]).values_list("annotator", "item"))
    assert len(annotations) == len(submitted)  # each kept exactly once, retries included
    assert len(set(annotations)) == len(annotations)
    per_item = Counter(item for _, item in annotations)
    assert max(per_item.values()) <= overlap  # never past the overlap: no item leased to two at once
    completed = dict(Item.objects.filter(campaign_id=campaign["id"]).values_list("pk", "completed"))
    assert all(completed[item] == n for item, n in per_item.items())  # the counters match the rows
