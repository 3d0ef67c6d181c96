"""Versions in the browser: an edit or a split is followed live to its new version, and the diff
shows each edit as a word diff in context and the rows that moved between splits."""

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LONG = " ".join(f"word{i}" for i in range(600))  # far longer than any summary shows


def _dataset(owner, project, name, records):
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    dataset = Dataset.objects.create(project=project, name=name, created_by=owner)
    version = write_version(dataset=dataset, author=owner, records=records,
                            roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})
    return dataset, version


def test_an_edit_deep_in_a_long_response_is_followed_live_and_diffed_word_by_word(page, scientist, owner, project,
                                                                                   celery_worker):
    dataset, version = _dataset(owner, project, "Long answers", [
        {"id": "r0", "prompt": "Explain everything", "response": LONG, "label": "long"},
        {"id": "r1", "prompt": "Short one", "response": "ok", "label": "short"}])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/1/rows/0/")
    page.get_by_label("Response").fill(LONG.replace("word540 word541", "a <b>better</b> phrase"))
    page.get_by_label("What changed").fill("fix the end")
    page.get_by_role("button", name="Save as a new version").click()

    expect(page).to_have_url(re.compile(r"/versions/1/\?job=\d+"))
    job = page.get_by_test_id("derive-job")
    expect(job).to_contain_text("Edit")
    expect(job.locator("[data-field=state]")).to_have_text("succeeded", timeout=60_000)  # not a stale "queued"
    job.get_by_role("link", name="new version v2").click()
    expect(page.get_by_role("heading", name="Long answers · version 2")).to_be_visible()

    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/diff/?old=1&new=2")
    expect(page.get_by_test_id("diff-counts")).to_contain_text("1 changed")
    response = page.get_by_test_id("diff-change").locator("[data-testid=word-diff][data-field=response]")
    expect(response.locator("del")).to_have_text("word540 word541")
    expect(response.locator("ins")).to_have_text("a <b>better</b> phrase")  # the edit as text, not markup
    expect(response).to_contain_text("word537 word538 word539")  # context before the change
    expect(response).to_contain_text("word542 word543 word544")  # and after it
    expect(response).to_contain_text("…")
    expect(response).not_to_contain_text("word0 ")  # the long unchanged start is left out
    assert page.get_by_test_id("diff-change").locator("[data-testid=word-diff]").count() == 1  # only that field


def test_a_split_is_followed_live_gets_its_own_hash_and_its_diff_lists_the_moves(page, scientist, owner, project,
                                                                                 celery_worker):
    from apps.datasets.models import DatasetVersion

    dataset, version = _dataset(owner, project, "To split", [
        {"id": f"r{i}", "prompt": f"question {i}", "response": f"answer {i}", "label": "ab"[i % 2]}
        for i in range(40)])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/1/")
    page.get_by_label("Seed", exact=True).fill("3")
    page.get_by_role("button", name="Split", exact=True).click()

    expect(page.get_by_text("Splitting v1 into a new version")).to_be_visible()
    job = page.get_by_test_id("derive-job")
    expect(job.get_by_role("link", name="new version v2")).to_be_visible(timeout=60_000)
    expect(job.locator("[data-field=rows]")).to_have_text("40")
    job.get_by_role("link", name="new version v2").click()
    expect(page.get_by_test_id("split-counts")).to_contain_text("train 32, validation 4, test 4")
    split = DatasetVersion.objects.get(dataset=dataset, number=2)
    assert split.content_hash != version.content_hash
    expect(page.get_by_text(split.content_hash[:16])).to_be_visible()

    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/")
    page.get_by_role("link", name="Changes in v2").click()
    counts = page.get_by_test_id("diff-counts")
    expect(counts).to_contain_text("0 changed")
    expect(counts).to_contain_text("40 moved between splits")
    moved = page.get_by_test_id("diff-moved").locator("li")
    expect(moved).to_have_count(10)
    expect(moved.first).to_contain_text(re.compile(r"no split → (train|validation|test)"))


def test_a_job_that_ends_while_the_page_is_open_shows_its_new_version_without_a_reload(page, viewer, owner, project):
    from apps.datasets.derive import run_derive
    from apps.datasets.models import DeriveJob

    dataset, version = _dataset(owner, project, "Watched", [
        {"id": f"r{i}", "prompt": f"q{i}", "response": f"a{i}"} for i in range(3000)])
    job = DeriveJob.objects.create(parent=version, kind=DeriveJob.Kind.EDIT, created_by=owner,
                                   params={"edits": {"1": {"response": "fixed"}}, "drops": [], "message": "fix"})
    browser_login(page, viewer.username)
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/1/?job={job.pk}")
    box = page.get_by_test_id("derive-job")
    expect(box).to_contain_text("Edit · queued · 0 of 3000 rows")
    expect(box.locator("[data-field=live]")).to_be_visible()  # listening
    page.evaluate("window.notReloaded = true")
    run_derive(job.pk)  # as the worker would
    expect(box.locator("[data-field=state]")).to_have_text("succeeded")
    expect(box.locator("[data-field=rows]")).to_have_text("3000")
    expect(box.get_by_role("link", name="new version v2")).to_have_attribute(
        "href", f"/projects/{project.pk}/datasets/{dataset.pk}/versions/2/")
    assert page.evaluate("window.notReloaded") is True  # followed live, not reloaded


def test_a_long_diff_pages_through_its_changes(page, scientist, owner, project):
    from apps.datasets.selectors import DIFF_EXAMPLES, DIFF_PAGE_ROWS
    from apps.datasets.writer import write_version

    records = [{"id": f"r{i}", "prompt": f"question {i}", "response": f"answer {i}", "label": "x"} for i in range(80)]
    dataset, version = _dataset(owner, project, "Many edits", records)
    edited = [{**r, "response": r["response"] + " (fixed)"} if i < 60 else r for i, r in enumerate(records)]
    write_version(dataset=dataset, author=owner, records=edited, parent=version,
                  roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/diff/?old=1&new=2")
    expect(page.get_by_test_id("diff-counts")).to_contain_text("60 changed")
    expect(page.get_by_test_id("diff-change")).to_have_count(DIFF_EXAMPLES)

    page.get_by_role("link", name="All 60 changed →").click()
    changes = page.get_by_test_id("diff-change")
    expect(changes).to_have_count(DIFF_PAGE_ROWS)
    expect(changes.first).to_contain_text("r0")
    expect(changes.first.locator("ins")).to_have_text("(fixed)")
    pager = page.get_by_test_id("diff-pager")
    expect(pager.get_by_role("link", name="First page")).to_have_count(0)
    pager.get_by_role("link", name="Next page").click()
    expect(changes).to_have_count(60 - DIFF_PAGE_ROWS)
    expect(changes.first).to_contain_text(f"r{DIFF_PAGE_ROWS}")
    expect(page.get_by_test_id("diff-kind")).to_contain_text(f"after row #{DIFF_PAGE_ROWS - 1}")
    expect(pager.get_by_role("link", name="Next page")).to_have_count(0)  # the last page
    pager.get_by_role("link", name="First page").click()
    expect(changes).to_have_count(DIFF_PAGE_ROWS)
    page.get_by_role("link", name="← All kinds of change").click()
    expect(page.get_by_test_id("diff-change")).to_have_count(DIFF_EXAMPLES)
