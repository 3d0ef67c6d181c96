"""A scientist launches a classifier from the form on a labelled version and watches its scores and
its confusion matrix drawn live on the job page."""

import pytest
from playwright.sync_api import expect

from tests.conftest import browser_login
from tests.e2e.test_training import fill_fast_config
from tests.training.test_classify_jobs import keyword_records, labelled_version

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_scientist_launches_a_classifier_and_sees_scores_and_confusion_matrix(page, scientist, owner, project,
                                                                             tiny_model, celery_worker):
    version = labelled_version(project, owner, keyword_records(48, seed=1), keyword_records(12, seed=2))
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/jobs/new/")
    page.get_by_label("Name", exact=True).fill("Topic classifier")
    page.get_by_label("Method", exact=True).select_option("classify")
    page.get_by_label("Base model", exact=True).select_option(label=tiny_model.name)
    page.get_by_label("Dataset version").select_option(str(version.pk))
    page.get_by_label("Training split").select_option("train")
    page.get_by_label("Evaluation split").select_option("validation")
    fill_fast_config(page)
    page.get_by_label("Class weights (inverse frequency)").check()
    page.get_by_role("button", name="Launch").click()

    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=120_000)
    # train accuracy, eval accuracy, eval macro-F1; and the last evaluation's 2 x 2 matrix with its classes
    expect(page.locator("#chart-scores .scatterlayer .trace")).to_have_count(3)
    confusion = page.get_by_test_id("chart-confusion")
    expect(confusion.locator(".hm")).to_have_count(1)
    for name in ("city", "country"):
        expect(confusion.locator(".xtick", has_text=name)).to_have_count(1)
        expect(confusion.locator(".ytick", has_text=name)).to_have_count(1)
