"""A scientist imports a JSONL in the browser, maps its columns, watches it run, browses and searches."""

import json
import re

import pytest
from playwright.sync_api import expect

from apps.datasets.services import dataset_create
from tests.conftest import browser_login, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_scientist_uploads_maps_watches_progress_browses_and_searches(page, scientist, project, celery_worker,
                                                                      tmp_path):
    dataset = dataset_create(user=scientist, project=project, name="Support chats")
    rows = [{"question": f"How do I reset password {i}?" if i % 50 else f"Where is my llama {i}?",
             "answer": f"Answer {i}", "topic": "vip" if i % 100 == 0 else "account" if i % 2 else "billing",
             "note": "<img src=x onerror=alert(1)>", "contact": f"user{i}@example.com" if i % 1000 == 0 else ""}
            for i in range(5000)]
    upload = tmp_path / "support.jsonl"
    upload.write_text("".join(json.dumps(row) + "\n" for row in rows))

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/")
    page.get_by_label("File").set_input_files(str(upload))
    page.get_by_role("button", name="Upload and preview").click()

    preview = page.get_by_test_id("preview")
    expect(preview).to_contain_text("How do I reset password 1?")
    expect(preview).to_contain_text("<img src=x onerror=alert(1)>")  # shown as text, not markup
    expect(page.get_by_label("question")).to_have_value("prompt")  # suggested from the column names
    expect(page.get_by_label("answer")).to_have_value("response")
    page.get_by_label("topic").select_option("label")
    page.get_by_label("Version message").fill("support logs, November")
    page.get_by_role("button", name="Start import").click()

    progress = page.get_by_test_id("import-progress")
    expect(progress.locator("[data-field=state]")).to_have_text("succeeded", timeout=60_000)
    expect(progress).to_contain_text("5000 rows")
    progress.get_by_role("link", name="Browse version 1").click()

    expect(page.get_by_role("heading", name="Support chats · version 1")).to_be_visible()
    table = page.get_by_test_id("rows")
    expect(table).to_contain_text("How do I reset password 1?")
    expect(table.locator("tbody tr")).to_have_count(50)
    page.get_by_role("link", name="Next page").click()
    expect(table).to_contain_text("How do I reset password 51?")

    page.get_by_label("Search text").fill("llama")
    page.get_by_role("button", name="Search").click()
    expect(table.locator("tbody tr")).to_have_count(50)
    expect(table).not_to_contain_text("reset password")
    page.get_by_label("Label", exact=True).fill("vip")
    page.get_by_role("button", name="Search").click()
    expect(table.locator("tbody tr")).to_have_count(50)
    expect(table).to_contain_text("Where is my llama 100?")
    expect(table).not_to_contain_text("Where is my llama 50?")
    assert page.evaluate("document.querySelectorAll('img').length") == 0

    csp_errors = []
    page.on("console", lambda message: csp_errors.append(message.text)
            if "Content Security Policy" in message.text or message.type == "error" else None)
    page.get_by_role("link", name="Statistics").click()
    expect(page.get_by_test_id("stats-counts")).to_contain_text("5000 rows")
    expect(page.get_by_test_id("chart-lengths").locator("svg.main-svg").first).to_be_visible(timeout=15_000)
    expect(page.get_by_test_id("chart-labels")).to_contain_text("billing")
    assert csp_errors == []
    page.go_back()

    version_one = page.url
    page.get_by_role("button", name="Scan for personal data").click()
    for _ in range(60):  # the scan runs in the worker
        if page.get_by_test_id("pii-state").inner_text() == "succeeded":
            break
        page.wait_for_timeout(500)
        page.reload()
    expect(page.get_by_test_id("pii-counts")).to_contain_text("email")
    expect(page.get_by_test_id("pii")).to_contain_text("5 rows hold personal data")
    expect(page.get_by_test_id("pii")).not_to_contain_text("user1000@example.com")  # masked

    page.get_by_label("Seed", exact=True).fill("7")
    page.get_by_role("button", name="Split").click()
    expect(page.get_by_text("Splitting v1 into a new version")).to_be_visible()
    jobs = page.get_by_test_id("derive-jobs")  # the page follows the split in the worker
    jobs.get_by_role("link", name="new version v2").click(timeout=60_000)
    expect(page.get_by_test_id("split-counts")).to_contain_text("train 4000, validation 500, test 500")
    page.get_by_label("Split", exact=True).select_option("test")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_test_id("rows").locator("tbody tr")).to_have_count(50)
    page.goto(version_one.rsplit("/versions/", 1)[0] + "/")
    page.get_by_role("link", name="Changes in v2").click()
    expect(page.get_by_test_id("diff-counts")).to_contain_text("0 added")
    expect(page.get_by_test_id("diff-counts")).to_contain_text("0 changed")
    expect(page.get_by_test_id("diff-counts")).to_contain_text("5000 moved between splits")
    page.goto(version_one)

    with page.expect_download() as download:
        page.get_by_role("link", name="JSONL").click()
    exported = [json.loads(line) for line in open(download.value.path())]
    assert len(exported) == 5000
    assert exported[1]["prompt"] == "How do I reset password 1?" and exported[0]["label"] == "vip"
    assert re.match(r"Support chats-v1\.jsonl", download.value.suggested_filename)


def test_a_viewer_watches_a_pii_scan_run_live_and_sees_its_report(page, viewer, owner, project):
    from apps.datasets.derive import run_derive
    from apps.datasets.models import Dataset, DeriveJob
    from apps.datasets.writer import write_version

    dataset = Dataset.objects.create(project=project, name="Mail", created_by=owner)
    version = write_version(dataset=dataset, author=owner, roles={"prompt": "prompt"},
                            records=[{"prompt": f"write to user{i}@example.com"} for i in range(6000)])
    job = DeriveJob.objects.create(parent=version, kind=DeriveJob.Kind.PII_SCAN, created_by=owner)
    browser_login(page, viewer.username)
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/{version.number}/")
    running = page.get_by_test_id("derive-job")
    expect(running).to_contain_text("PII scan · queued · 0 of 6000 rows")
    expect(running.locator("[data-field=live]")).to_be_visible()  # listening
    page.evaluate("window.notReloaded = true")  # gone if the page reloads
    run_derive(job.pk)  # as the worker would; the page follows over its socket, then shows the report
    expect(page.get_by_test_id("pii-state")).to_have_text("succeeded")
    expect(page.get_by_test_id("pii")).to_contain_text("6000 rows hold personal data")
    expect(running).to_contain_text("PII scan · succeeded · 6000 of 6000 rows")
    assert page.evaluate("window.notReloaded") is True  # the report was put in place, not reloaded


def test_a_scientist_opens_a_chat_row_sees_it_rendered_safely_and_fixes_it_into_a_new_version(
        page, scientist, owner, project, celery_worker):
    from apps.datasets.models import Dataset, DeriveJob
    from apps.datasets.writer import write_version

    dataset = Dataset.objects.create(project=project, name="Chats", created_by=owner)
    version = write_version(dataset=dataset, author=owner, roles={"messages": "messages", "response": "response"},
                            records=[{"messages": [{"role": "user", "content": "Hi <script>alert(1)</script> **there**"},
                                                   {"role": "assistant", "content": "`code` reply"}],
                                      "response": "old answer", "topic": "greeting"}])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/1/")
    page.get_by_role("link", name="Row 0").click()
    turns = page.get_by_test_id("turns")
    expect(turns).to_contain_text("Hi <script>alert(1)</script> there")  # raw HTML shown as text
    expect(turns.locator("strong").filter(has_text="there")).to_have_count(1)  # Markdown rendered
    expect(turns.locator("code")).to_have_text("code")
    expect(page.get_by_test_id("metadata")).to_contain_text("greeting")
    page.get_by_label("Response").fill("a kinder answer")
    page.get_by_label("What changed").fill("kinder reply")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.get_by_text("Writing the new version")).to_be_visible()
    # The page follows the job over its socket to the new version.
    page.get_by_test_id("derive-job").get_by_role("link", name="new version v2").click(timeout=60_000)
    assert DeriveJob.objects.get(kind="edit").state == "succeeded"
    expect(page.get_by_test_id("rows")).to_contain_text("a kinder answer")
    assert version.rows.get().response == "old answer"


def test_a_scientist_exports_a_version_as_parquet_and_downloads_it(page, scientist, owner, project, celery_worker,
                                                                   tmp_path):
    import pyarrow.parquet as pq

    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    dataset = Dataset.objects.create(project=project, name="Export me", created_by=owner)
    write_version(dataset=dataset, author=owner, roles={"prompt": "prompt"},
                  records=[{"prompt": f"row {i}"} for i in range(3000)])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/1/")
    page.get_by_label("Export as a file").select_option("parquet")
    page.get_by_role("button", name="Export", exact=True).click()
    link = page.get_by_role("link", name="download Export_me-v1.parquet")
    expect(link).to_be_visible(timeout=60_000)  # the page follows the job and reloads when it is written
    with page.expect_download() as download:
        link.click()
    path = tmp_path / "export.parquet"
    download.value.save_as(path)
    assert pq.read_table(path).num_rows == 3000


def test_a_viewer_counts_tokens_and_sees_the_token_length_chart(page, viewer, owner, project, tiny_model,
                                                                  celery_worker):
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    dataset = Dataset.objects.create(project=project, name="Words", created_by=owner)
    write_version(dataset=dataset, author=owner, roles={"prompt": "prompt", "response": "response"},
                  records=[{"prompt": "what is paris ?", "response": "the capital of france"}] * 50)
    browser_login(page, viewer.username)
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/1/stats/")
    page.get_by_label("Count tokens with").select_option(label=tiny_model.name)
    page.get_by_role("button", name="Count tokens").click()
    from apps.datasets.models import DeriveJob

    job = wait_for(lambda: (j := DeriveJob.objects.get(kind="token_stats")).state in ("succeeded", "failed") and j,
                   timeout=60, what="the token count")
    assert job.state == "succeeded", job.error
    chart = page.get_by_test_id("chart-tokens")
    expect(chart.locator("svg.main-svg").first).to_be_visible(timeout=60_000)  # the page reloads when done
    expect(page.get_by_test_id("token-lengths")).to_contain_text("longest prompt 4, response 4, total 8 tokens")


def test_an_owner_purges_an_old_version_and_is_told_why_a_pinned_one_stays(page, owner, project, celery_worker):
    from apps.datasets.models import Dataset, DatasetRow
    from apps.datasets.writer import write_version
    from tests.training.fixtures import make_job

    dataset = Dataset.objects.create(project=project, name="Tickets", created_by=owner)
    roles = {"prompt": "prompt", "response": "response"}
    old = write_version(dataset=dataset, author=owner, roles=roles, message="first dump",
                        records=[{"prompt": f"q{i}", "response": f"a{i}"} for i in range(40)])
    used = write_version(dataset=dataset, author=owner, roles=roles, parent=old, message="cleaned",
                         records=[{"prompt": "q1", "response": "a1"}])
    job = make_job(project, owner, state="succeeded")
    job.dataset_version = used
    job.save(update_fields=["dataset_version"])

    browser_login(page, owner.username)
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/")
    page.get_by_label("Purge v2…").click()
    page.get_by_role("button", name="Purge v2 for good").click()
    expect(page.get_by_role("status")).to_contain_text(
        f"Version 2 cannot be purged: fine-tune #{job.pk} uses it.")
    page.get_by_label("Purge v1…").click()
    page.get_by_role("button", name="Purge v1 for good").click()
    expect(page.get_by_role("status")).to_contain_text("Purging v1")
    purged = page.get_by_test_id("purged-version")
    expect(purged).to_contain_text("v1")
    expect(purged).to_contain_text("purged")
    expect(purged).to_contain_text(f"by {owner.username}")
    expect(purged.get_by_role("link")).to_have_count(0)  # nothing left to open
    wait_for(lambda: not DatasetRow.objects.filter(version=old).exists(), timeout=60, what="the worker's purge")
    assert DatasetRow.objects.filter(version=used).count() == 1


def test_a_scientist_discards_an_upload_she_will_not_import(page, scientist, project, tmp_path):
    from apps.datasets.models import ImportJob

    dataset = dataset_create(user=scientist, project=project, name="Wrong file")
    upload = tmp_path / "wrong.jsonl"
    upload.write_text(json.dumps({"prompt": "not this one"}) + "\n")
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{dataset.pk}/")
    page.get_by_label("File").set_input_files(str(upload))
    page.get_by_role("button", name="Upload and preview").click()
    expect(page.get_by_test_id("preview")).to_contain_text("not this one")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Discard upload").click()
    expect(page).to_have_url(re.compile(rf"/projects/{project.pk}/datasets/{dataset.pk}/$"))
    expect(page.get_by_role("status").or_(page.locator(".messages"))).to_contain_text(
        "Upload “wrong.jsonl” discarded; nothing was imported.")
    assert ImportJob.objects.get(dataset=dataset).state == "cancelled"
    assert not dataset.versions.exists()
