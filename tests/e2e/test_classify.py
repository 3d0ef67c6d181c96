"""A scientist launches a classifier from the form on a labelled version and watches its scores and
its confusion matrix drawn live on the job page; on a column of class lists the same form launches a
multi-label classifier, whose matrix is one row of outcomes per class."""

import pytest
from playwright.sync_api import expect

from tests.conftest import browser_login
from tests.e2e.test_training import fill_fast_config
from tests.training.test_classify_jobs import keyword_records, labelled_version, multi_label_records

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def launch_classifier(page, project, tiny_model, version):
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


def test_scientist_launches_a_classifier_and_sees_scores_and_confusion_matrix(page, scientist, owner, project,
                                                                             tiny_model, celery_worker):
    version = labelled_version(project, owner, keyword_records(48, seed=1), keyword_records(12, seed=2))
    launch_classifier(page, project, tiny_model, version)
    page.get_by_role("button", name="Launch").click()

    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=120_000)
    # train accuracy, eval accuracy, eval macro-F1; and the last evaluation's 2 x 2 matrix with its classes
    expect(page.locator("#chart-scores .scatterlayer .trace")).to_have_count(3)
    confusion = page.get_by_test_id("chart-confusion")
    expect(confusion.locator(".hm")).to_have_count(1)
    for name in ("city", "country"):
        expect(confusion.locator(".xtick", has_text=name)).to_have_count(1)
        expect(confusion.locator(".ytick", has_text=name)).to_have_count(1)


def test_a_column_of_class_lists_launches_a_multi_label_classifier_with_outcomes_per_class(
        page, scientist, owner, project, tiny_model, celery_worker):
    version = labelled_version(project, owner, multi_label_records(48, seed=1), multi_label_records(12, seed=2),
                               in_metadata="annotation.topics")
    launch_classifier(page, project, tiny_model, version)
    page.get_by_label("Label column", exact=True).fill("annotation.topics")
    expect(page.get_by_label("Multi-label", exact=True)).not_to_be_checked()  # the launch reads it from the column
    page.get_by_role("button", name="Launch").click()

    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=120_000)
    expect(page.get_by_text("class by class (multi-label)")).to_be_visible()
    confusion = page.get_by_test_id("chart-confusion")
    expect(confusion.locator(".hm")).to_have_count(1)
    for name in ("city", "country"):
        expect(confusion.locator(".ytick", has_text=name)).to_have_count(1)
    for outcome in ("true positive", "false positive", "false negative", "true negative"):
        expect(confusion.locator(".xtick", has_text=outcome)).to_have_count(1)
