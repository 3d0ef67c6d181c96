"""The comparison pages rendered by the server, per role; their scripts run in tests/e2e."""

import pytest

from apps.comparison.models import Comparison
from tests.comparison.factories import make_comparison, placeholder_model

pytestmark = pytest.mark.django_db


def test_the_create_form_queues_a_comparison_and_shows_service_errors_on_their_field(client, scientist, project):
    base, tuned = placeholder_model(project, "Base"), placeholder_model(project, "Tuned")
    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/comparisons/new/")
    assert page.status_code == 200 and b"Tuned" in page.content
    form = {"name": "Pages", "model_1": base.pk, "model_2": tuned.pk, "prompts": "what is paris ?\n\nhello\n",
            "max_new_tokens": 8, "temperature": 0, "sample_size": 20, "seed": 0}
    empty = client.post(f"/projects/{project.pk}/comparisons/new/", {**form, "prompts": "  "})
    assert empty.status_code == 400 and "prompt set is empty" in empty.content.decode()
    same = client.post(f"/projects/{project.pk}/comparisons/new/", {**form, "model_2": base.pk})
    assert same.status_code == 400 and "Each model may appear once" in same.content.decode()
    hot = client.post(f"/projects/{project.pk}/comparisons/new/", {**form, "temperature": 9})
    assert hot.status_code == 400 and 'id="id_temperature_error"' in hot.content.decode()
    response = client.post(f"/projects/{project.pk}/comparisons/new/", form)
    comparison = Comparison.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/comparisons/{comparison.pk}/")
    assert list(comparison.prompts.values_list("text", flat=True)) == ["what is paris ?", "hello"]


def test_an_annotator_sees_comparisons_to_vote_on_but_not_their_outputs(client, annotator, project, owner):
    comparison = make_comparison(project, owner)
    client.force_login(annotator)
    listing = client.get(f"/projects/{project.pk}/comparisons/").content.decode()
    assert f"/comparisons/{comparison.pk}/vote/" in listing
    assert f'href="/projects/{project.pk}/comparisons/{comparison.pk}/"' not in listing
    assert client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/vote/").status_code == 200
    assert client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/").status_code == 403
    assert client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/leaderboard/").status_code == 403
    assert client.get(f"/projects/{project.pk}/comparisons/new/").status_code == 403


def test_a_viewer_sees_the_grid_and_leaderboards_but_cannot_vote(client, viewer, project, owner):
    comparison = make_comparison(project, owner)
    client.force_login(viewer)
    grid = client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/")
    assert grid.status_code == 200 and b'data-testid="grid"' in grid.content and b"Vote blind" not in grid.content
    assert client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/leaderboard/").status_code == 200
    assert client.get(f"/projects/{project.pk}/leaderboard/").status_code == 200
    assert client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/vote/").status_code == 403
    assert client.get("/comparisons/").status_code == 200


def test_outsiders_get_404_on_every_comparison_page(client, outsider, project, owner):
    comparison = make_comparison(project, owner)
    client.force_login(outsider)
    for path in ("", "vote/", "leaderboard/"):
        assert client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/{path}").status_code == 404
    assert client.get(f"/projects/{project.pk}/comparisons/").status_code == 404
    assert client.post(f"/projects/{project.pk}/comparisons/{comparison.pk}/delete/").status_code == 404
    assert b"Base vs tuned" not in client.get("/comparisons/").content


def test_the_create_form_samples_a_dataset_version(client, scientist, project, owner):
    from tests.training.fixtures import make_version

    base, tuned = placeholder_model(project, "Base"), placeholder_model(project, "Tuned")
    version = make_version(project, owner)
    client.force_login(scientist)
    form = {"name": "Sampled", "model_1": base.pk, "model_2": tuned.pk, "prompts": "", "dataset_version": version.pk,
            "split": "validation", "sample_size": 3, "seed": 1, "max_new_tokens": 8, "temperature": 0}
    no_split = client.post(f"/projects/{project.pk}/comparisons/new/", {**form, "split": "dev"})
    assert no_split.status_code == 400 and 'id="id_split_error"' in no_split.content.decode()
    assert client.post(f"/projects/{project.pk}/comparisons/new/", form).status_code == 302
    comparison = Comparison.objects.get()
    assert comparison.prompts.count() == 3 and comparison.source["split"] == "validation"
    assert all(p.reference for p in comparison.prompts.all())
