"""Blind pairwise voting through the API: nothing names a model before the vote, sides are
drawn by the server, one vote per person per pair, retries are idempotent."""

import pytest

from apps.comparison.models import Pair, Vote
from tests.comparison.factories import make_comparison, placeholder_model

pytestmark = pytest.mark.django_db


def next_pair(client, comparison):
    response = client.post(f"/api/comparisons/{comparison.pk}/pairs/next/")
    assert response.status_code == 200, response.content
    return response.json()


def vote(client, comparison, pair_id, choice="a", client_id="vote-1"):
    return client.post(f"/api/comparisons/{comparison.pk}/votes/",
                       {"pair": pair_id, "choice": choice, "client_id": client_id}, content_type="application/json")


@pytest.fixture
def comparison(project, owner):
    return make_comparison(project, owner, models=[placeholder_model(project, "Secret Base"),
                                                   placeholder_model(project, "Secret Tuned")])


def test_a_pair_names_no_model_until_the_vote_reveals_them(client, annotator, comparison):
    client.force_login(annotator)
    served = next_pair(client, comparison)
    assert set(served["pair"]) == {"id", "prompt", "a", "b", "prompt_html", "a_html", "b_html"}  # no model named
    assert served["remaining"] == 2 and served["voted"] == 0
    model_ids = [str(c.model_id) for c in comparison.contestants.all()]
    raw = client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").content.decode()
    assert "Secret Base\"" not in raw.replace("Secret Base says", "") and "model" not in raw
    assert all(f'"{i}"' not in raw for i in model_ids)
    assert next_pair(client, comparison)["pair"] == served["pair"]  # an open pair comes back unchanged

    response = vote(client, comparison, served["pair"]["id"], "a")
    assert response.status_code == 201
    revealed = response.json()
    pair = Pair.objects.get(pk=served["pair"]["id"])
    assert revealed["a"]["id"] == pair.left.model_id and revealed["b"]["id"] == pair.right.model_id
    assert served["pair"]["a"].startswith(revealed["a"]["name"])  # A was the left output
    assert revealed["winner"] == revealed["a"]
    vote_row = Vote.objects.get()
    assert vote_row.winner == pair.left and vote_row.loser == pair.right


def test_a_retried_vote_is_idempotent_and_a_different_second_vote_is_refused(client, annotator, comparison):
    client.force_login(annotator)
    pair_id = next_pair(client, comparison)["pair"]["id"]
    first = vote(client, comparison, pair_id, "b", client_id="abc")
    again = vote(client, comparison, pair_id, "b", client_id="abc")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json() == first.json() and Vote.objects.count() == 1
    same_choice_new_id = vote(client, comparison, pair_id, "b", client_id="other")
    assert same_choice_new_id.status_code == 200 and Vote.objects.count() == 1
    changed = vote(client, comparison, pair_id, "a", client_id="changed")
    assert changed.status_code == 409 and "already voted" in changed.json()["detail"]
    assert Vote.objects.get().choice == "b"

    other_pair = next_pair(client, comparison)["pair"]["id"]
    reused_id = vote(client, comparison, other_pair, "a", client_id="abc")
    assert reused_id.status_code == 409 and Vote.objects.count() == 1


def test_a_vote_on_a_pair_you_cannot_see_is_404(client, annotator, scientist, comparison, project, owner,
                                                 other_project, outsider):
    client.force_login(scientist)
    theirs = next_pair(client, comparison)["pair"]["id"]
    client.force_login(annotator)
    assert vote(client, comparison, theirs).status_code == 404  # served to someone else
    elsewhere = make_comparison(project, owner, name="Other")
    mine = next_pair(client, elsewhere)["pair"]["id"]
    assert vote(client, comparison, mine).status_code == 404  # a pair of another comparison
    assert vote(client, comparison, 999999).status_code == 404
    foreign = make_comparison(other_project, outsider, name="Foreign")
    assert vote(client, foreign, mine).status_code == 404
    assert not Vote.objects.exists()


def test_a_vote_after_the_comparison_was_deleted_is_404(client, annotator, scientist, comparison):
    client.force_login(annotator)
    pair_id = next_pair(client, comparison)["pair"]["id"]
    client.force_login(scientist)
    assert client.delete(f"/api/comparisons/{comparison.pk}/").status_code == 204
    client.force_login(annotator)
    assert vote(client, comparison, pair_id).status_code == 404
    assert client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").status_code == 404


def test_each_person_votes_each_pair_once_and_the_sides_are_drawn_by_the_server(client, annotator, viewer, project,
                                                                                owner):
    comparison = make_comparison(project, owner, models=3, prompts=[f"question {i}" for i in range(12)])
    client.force_login(annotator)
    seen, lefts = set(), set()
    while True:
        served = next_pair(client, comparison)
        if served["pair"] is None:
            assert served["remaining"] == 0 and served["voted"] == 36
            break
        pair = Pair.objects.get(pk=served["pair"]["id"])
        key = (pair.prompt_id, pair.first_id, pair.second_id)
        assert key not in seen
        seen.add(key)
        lefts.add(pair.first_on_left)
        assert vote(client, comparison, pair.pk, "tie", client_id=f"v{pair.pk}").status_code == 201
    assert len(seen) == 12 * 3 and lefts == {True, False}
    client.force_login(viewer)
    assert next_pair_status(client, comparison) == 403


def next_pair_status(client, comparison) -> int:
    return client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").status_code


def test_bad_votes_are_refused_naming_the_field(client, annotator, comparison):
    client.force_login(annotator)
    pair_id = next_pair(client, comparison)["pair"]["id"]
    assert "choice" in vote(client, comparison, pair_id, "left").json()
    assert "client_id" in vote(client, comparison, pair_id, "a", client_id="").json()
    assert "pair" in client.post(f"/api/comparisons/{comparison.pk}/votes/", {"choice": "a", "client_id": "x"},
                                 content_type="application/json").json()


def test_failed_outputs_are_never_served_for_voting(client, annotator, project, owner):
    comparison = make_comparison(project, owner, prompts=["only one"])
    comparison.outputs.filter(contestant__position=1).update(error="too long", text="")
    client.force_login(annotator)
    assert next_pair(client, comparison)["pair"] is None
