"""The comparison API without a worker: creating (every bad input named), roles, cancel,
delete, the grid, leaderboards and the export of votes as a dataset version."""

import pytest

from apps.comparison.models import Comparison, Vote
from apps.datasets.models import DatasetVersion
from apps.projects.models import AuditEvent
from tests.comparison.factories import make_comparison, placeholder_model
from tests.training.fixtures import make_version

pytestmark = pytest.mark.django_db


def create(client, project, **body):
    payload = {"name": "Base vs tuned", "prompts": ["what is paris ?", "what is the capital of france ?"],
               "params": {"max_new_tokens": 4}, **body}
    return client.post(f"/api/projects/{project.pk}/comparisons/", payload, content_type="application/json")


@pytest.fixture
def two_models(project):
    return [placeholder_model(project, "Base"), placeholder_model(project, "Tuned")]


def test_a_scientist_creates_a_comparison_of_typed_prompts_and_it_is_queued(client, scientist, project, two_models):
    client.force_login(scientist)
    response = create(client, project, models=[two_models[1].pk, two_models[0].pk],
                      references=["the capital of france", None])
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "queued" and body["prompt_count"] == 2 and body["cells_total"] == 4
    assert [m["name"] for m in body["models"]] == ["Tuned", "Base"]  # the order given is the column order
    assert body["params"]["max_new_tokens"] == 4 and body["params"]["temperature"] == 0.0
    comparison = Comparison.objects.get(pk=body["id"])
    assert [p.reference for p in comparison.prompts.order_by("position")] == ["the capital of france", None]
    assert AuditEvent.objects.filter(action="comparison.create", target_id=str(comparison.pk)).count() == 1


def test_a_project_runs_a_bounded_number_of_comparisons_at_once(client, scientist, project, two_models, settings):
    settings.COMPARISON_MAX_ACTIVE_PER_PROJECT = 1
    client.force_login(scientist)
    models = [m.pk for m in two_models]
    assert create(client, project, models=models).status_code == 201
    refused = create(client, project, models=models)
    assert refused.status_code == 429 and refused["Retry-After"] == "60" and "1 comparisons" in refused.json()["detail"]
    assert Comparison.objects.count() == 1
    Comparison.objects.update(state="cancelled")
    assert create(client, project, models=models).status_code == 201


@pytest.mark.parametrize("models, message", [
    ("one", "Compare 2 to 4 models"),
    ("five", "Compare 2 to 4 models"),
    ("duplicate", "Each model may appear once"),
    ("foreign", "No such model in this project"),
    ("unknown", "No such model in this project"),
    ("text", "No such model in this project"),
])
def test_a_comparison_needs_two_to_four_distinct_models_of_the_project(client, scientist, project, other_project,
                                                                       two_models, models, message):
    extra = [placeholder_model(project) for _ in range(3)]
    foreign = placeholder_model(other_project, "Theirs")
    ids = {"one": [two_models[0].pk], "five": [m.pk for m in two_models + extra],
           "duplicate": [two_models[0].pk, two_models[0].pk], "foreign": [two_models[0].pk, foreign.pk],
           "unknown": [two_models[0].pk, 999999], "text": [two_models[0].pk, "Base"]}[models]
    client.force_login(scientist)
    response = create(client, project, models=ids)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "models" and message in response.json()["detail"]
    assert "Theirs" not in response.content.decode()
    assert not Comparison.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"prompts": []}, "prompts"),
    ({"prompts": ["  "]}, "prompts"),
    ({"prompts": None}, "prompts"),
    ({"prompts": ["x"], "references": ["a", "b"]}, "references"),
    ({"prompts": ["x"], "params": {"max_new_tokens": 0}}, "params.max_new_tokens"),
    ({"prompts": ["x"], "params": {"temperature": -1}}, "params.temperature"),
    ({"prompts": ["x"], "params": {"beam": 3}}, "params.beam"),
    ({"prompts": ["x"], "name": " "}, "name"),
    ({"prompts": None, "dataset_version": 999999, "sample_size": 3}, "dataset_version"),
])
def test_bad_input_is_refused_naming_the_field(client, scientist, project, two_models, body, field):
    client.force_login(scientist)
    response = create(client, project, models=[m.pk for m in two_models], **body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data.get("field") == field or field in data, data
    assert not Comparison.objects.exists()


def test_prompts_are_sampled_from_a_dataset_split_with_a_seed_and_carry_references(client, scientist, project,
                                                                                 owner, two_models):
    version = make_version(project, owner)  # 24 train rows, 6 validation rows, each with a response
    client.force_login(scientist)
    bodies = [create(client, project, models=[m.pk for m in two_models], prompts=None, dataset_version=version.pk,
                     split="validation", sample_size=4, seed=seed).json() for seed in (7, 7, 8)]
    picked = [list(Comparison.objects.get(pk=b["id"]).prompts.order_by("position")
                   .values_list("source_position", flat=True)) for b in bodies]
    assert picked[0] == picked[1] and len(picked[0]) == 4 and picked[0] != picked[2]
    assert all(p >= 24 for p in picked[0])  # validation rows only
    prompt = Comparison.objects.get(pk=bodies[0]["id"]).prompts.first()
    row = version.rows.get(position=prompt.source_position)
    assert prompt.text == row.prompt and prompt.reference == row.response
    assert bodies[0]["source"]["content_hash"] == version.content_hash

    too_many = create(client, project, models=[m.pk for m in two_models], prompts=None, dataset_version=version.pk,
                      split="nope", sample_size=4)
    assert too_many.status_code == 400 and too_many.json()["field"] == "split"
    no_size = create(client, project, models=[m.pk for m in two_models], prompts=None, dataset_version=version.pk)
    assert no_size.status_code == 400 and no_size.json()["field"] == "sample_size"


def test_a_dataset_version_of_another_project_is_no_such_version(client, scientist, project, other_project,
                                                               outsider, two_models):
    version = make_version(other_project, outsider)
    client.force_login(scientist)
    response = create(client, project, models=[m.pk for m in two_models], prompts=None, dataset_version=version.pk,
                      sample_size=2)
    assert response.status_code == 400 and response.json()["field"] == "dataset_version"


def test_roles_annotators_and_viewers_cannot_run_outsiders_see_nothing(client, annotator, viewer, outsider,
                                                                        project, two_models, owner):
    comparison = make_comparison(project, owner, models=two_models)
    for user, status in ((annotator, 403), (viewer, 403), (outsider, 404)):
        client.force_login(user)
        assert create(client, project, models=[m.pk for m in two_models]).status_code == status
    client.force_login(viewer)
    assert client.get(f"/api/comparisons/{comparison.pk}/grid/").status_code == 200
    assert client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").json()["missing_permission"] == "compare.vote"
    client.force_login(annotator)
    assert client.get(f"/api/comparisons/{comparison.pk}/grid/").json()["missing_permission"] == "compare.view"
    assert client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").status_code == 200
    client.force_login(outsider)
    for url in (f"/api/comparisons/{comparison.pk}/", f"/api/comparisons/{comparison.pk}/grid/",
                f"/api/comparisons/{comparison.pk}/leaderboard/", f"/api/projects/{project.pk}/leaderboard/"):
        response = client.get(url)
        assert response.status_code == 404 and b"Base" not in response.content
    assert client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").status_code == 404


def test_cancel_ends_a_queued_comparison_and_refuses_an_ended_one(client, scientist, project, owner):
    queued = make_comparison(project, owner, state="queued", outputs=False)
    client.force_login(scientist)
    response = client.post(f"/api/comparisons/{queued.pk}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    again = client.post(f"/api/comparisons/{queued.pk}/cancel/")
    assert again.status_code == 409


def test_the_grid_lists_every_output_with_its_timings_and_per_model_summaries(client, viewer, project, owner):
    comparison = make_comparison(project, owner, references=["paris", None, "yes"])
    client.force_login(viewer)
    grid = client.get(f"/api/comparisons/{comparison.pk}/grid/").json()
    assert len(grid["prompts"]) == 3 and len(grid["cells"]) == 6
    assert grid["prompts"][0]["reference"] == "paris"
    assert {s["cells"] for s in grid["summaries"]} == {3}
    assert grid["summaries"][0]["mean_latency_s"] == pytest.approx(0.1)


def test_html_in_prompts_is_stored_as_text_and_shown_escaped(client, scientist, project, two_models, owner):
    script = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    client.force_login(scientist)
    body = create(client, project, models=[m.pk for m in two_models], prompts=[script]).json()
    comparison = Comparison.objects.get(pk=body["id"])
    assert comparison.prompts.get().text == script
    page = client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/").content.decode()
    assert script not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page


def test_deleting_a_comparison_removes_its_votes_and_is_audited(client, scientist, project, owner):
    comparison = make_comparison(project, owner)
    client.force_login(scientist)
    assert client.delete(f"/api/comparisons/{comparison.pk}/").status_code == 204
    assert not Comparison.objects.filter(pk=comparison.pk).exists()
    assert AuditEvent.objects.filter(action="comparison.delete").count() == 1
    assert client.get(f"/api/comparisons/{comparison.pk}/").status_code == 404


def _vote_everything(client, comparison, choose):
    while True:
        pair = client.post(f"/api/comparisons/{comparison.pk}/pairs/next/").json()["pair"]
        if pair is None:
            return
        choice = choose(pair)
        response = client.post(f"/api/comparisons/{comparison.pk}/votes/",
                               {"pair": pair["id"], "choice": choice, "client_id": f"c-{pair['id']}"},
                               content_type="application/json")
        assert response.status_code == 201, response.content


def test_the_leaderboards_count_votes_per_comparison_and_across_the_project(client, scientist, annotator, project,
                                                                            owner):
    base, tuned = placeholder_model(project, "Base"), placeholder_model(project, "Tuned")
    first = make_comparison(project, owner, models=[base, tuned])
    second = make_comparison(project, owner, models=[tuned, base], name="Again")

    def prefer_tuned(pair):
        return "a" if pair["a"].startswith("Tuned") else "b"

    for user in (scientist, annotator):
        client.force_login(user)
        _vote_everything(client, first, prefer_tuned)
        if user is scientist:  # read (and memoized) before the next votes: they must still count
            assert client.get(f"/api/comparisons/{first.pk}/leaderboard/").json()["total_votes"] == 3
    client.force_login(annotator)
    _vote_everything(client, second, lambda pair: "tie")

    client.force_login(scientist)
    board = client.get(f"/api/comparisons/{first.pk}/leaderboard/").json()
    assert board["total_votes"] == 6
    top, bottom = board["standings"]
    assert (top["name"], top["wins"], top["votes"], top["win_rate"]) == ("Tuned", 6, 6, 1.0)
    assert (bottom["name"], bottom["losses"]) == ("Base", 6)
    assert top["ci_low"] <= top["rating"] <= top["ci_high"] and top["rating"] > bottom["rating"]
    names = [m["name"] for m in board["models"]]
    assert board["win_matrix"][names.index("Tuned")][names.index("Base")] == 1.0

    project_board = client.get(f"/api/projects/{project.pk}/leaderboard/").json()
    assert project_board["total_votes"] == 9
    assert {s["name"]: s["ties"] for s in project_board["standings"]} == {"Tuned": 3, "Base": 3}
    page = client.get(f"/projects/{project.pk}/leaderboard/")
    assert page.status_code == 200 and b"Tuned" in page.content


def test_votes_are_exported_as_a_preference_dataset_version(client, scientist, annotator, viewer, project, owner):
    base, tuned = placeholder_model(project, "Base"), placeholder_model(project, "Tuned")
    comparison = make_comparison(project, owner, models=[base, tuned])
    client.force_login(annotator)
    choices = iter(["a", "tie", "b"])
    _vote_everything(client, comparison, lambda pair: next(choices))

    client.force_login(viewer)
    refused = client.post(f"/api/comparisons/{comparison.pk}/export/", {"dataset_name": "Prefs"},
                          content_type="application/json")
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "dataset.import"

    client.force_login(scientist)
    response = client.post(f"/api/comparisons/{comparison.pk}/export/", {"dataset_name": "Prefs"},
                           content_type="application/json")
    assert response.status_code == 201, response.content
    exported = response.json()
    assert exported["rows"] == 2 and exported["version"] == 1  # the tie names no preferred answer
    version = DatasetVersion.objects.get(dataset_id=exported["dataset"], number=1)
    assert version.source["kind"] == "comparison_votes"
    votes = {v.pair.prompt.text: v for v in Vote.objects.exclude(winner=None).select_related("pair__prompt")}
    for row in version.rows.order_by("position"):
        vote = votes[row.prompt]
        assert row.response.startswith(vote.winner.model.name)
        assert row.metadata["rejected"].startswith(vote.loser.model.name)
        # canonical rows keep scalar metadata as text
        assert row.metadata["chosen_model"] == str(vote.winner.model_id)
        assert row.metadata["rejected_model"] == str(vote.loser.model_id)
        assert row.metadata["voter"] == str(annotator.pk) and row.metadata["voter_name"] == annotator.username

    into_existing = client.post(f"/api/comparisons/{comparison.pk}/export/", {"dataset": exported["dataset"]},
                                content_type="application/json").json()
    assert into_existing["version"] == 2
    assert DatasetVersion.objects.get(dataset_id=exported["dataset"], number=2).parent.number == 1
    duplicate_name = client.post(f"/api/comparisons/{comparison.pk}/export/", {"dataset_name": "prefs"},
                                 content_type="application/json")
    assert duplicate_name.status_code == 400 and duplicate_name.json()["field"] == "dataset_name"


def test_nothing_to_export_without_a_decisive_vote(client, scientist, project, owner):
    comparison = make_comparison(project, owner)
    client.force_login(scientist)
    response = client.post(f"/api/comparisons/{comparison.pk}/export/", {"dataset_name": "Prefs"},
                           content_type="application/json")
    assert response.status_code == 400 and "nothing to export" in response.json()["detail"]


def test_deleting_the_project_deletes_its_comparisons_and_votes(client, owner, annotator, project):
    comparison = make_comparison(project, owner)
    client.force_login(annotator)
    _vote_everything(client, comparison, lambda pair: "a")
    client.force_login(owner)
    response = client.delete(f"/api/projects/{project.pk}/", {"confirm_name": project.name},
                             content_type="application/json")
    assert response.status_code == 204, response.content
    assert not Comparison.objects.exists() and not Vote.objects.exists()


def test_the_list_reads_a_constant_number_of_queries(client, viewer, project, owner, django_assert_max_num_queries):
    for i in range(5):
        make_comparison(project, owner, name=f"C{i}")
    client.force_login(viewer)
    with django_assert_max_num_queries(12):
        body = client.get(f"/api/projects/{project.pk}/comparisons/").json()
    results = body["results"] if isinstance(body, dict) else body
    assert len(results) == 5 and all(r["prompt_count"] == 3 and len(r["models"]) == 2 for r in results)
