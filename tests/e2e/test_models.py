"""A scientist registers a local model in the browser, watches a worker check it, and reads
its memory estimate."""

import re
import uuid

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.conftest import browser_login
from tests.registry.test_registry import tiny_model_dir

pytestmark = pytest.mark.e2e


def test_scientist_registers_a_model_and_estimates_memory(page, scientist, project, celery_worker):
    root = settings.MODEL_ROOTS[0]  # the worker process's root too
    path, parameters = tiny_model_dir(root / f"tiny-llama-{uuid.uuid4().hex[:8]}")

    browser_login(page, "sofia")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Models").click()
    expect(page.get_by_test_id("models")).to_contain_text("No models yet")
    page.goto(f"/projects/{project.pk}/models/")
    page.get_by_label("Name").fill("Tiny llama")
    page.get_by_label("Path").fill(str(root / "elsewhere"))
    page.get_by_role("button", name="Register").click()
    expect(page.locator(".field-error")).to_contain_text("does not exist")

    page.get_by_label("Path").fill(str(path))
    page.get_by_role("button", name="Register").click()
    # The real worker may finish before the page is drawn: checking (then followed in place) or ready.
    expect(page.get_by_test_id("model-status")).to_have_text(re.compile("^(checking|ready)$"))
    page.evaluate("window.stillThisPage = true")
    # The worker inspects it; the page follows in place, with no click and no reload.
    expect(page.get_by_test_id("model-status")).to_have_text("ready", timeout=60_000)
    assert page.evaluate("window.stillThisPage") is True
    expect(page.get_by_test_id("model-info")).to_contain_text(f"{parameters:,}")
    expect(page.get_by_test_id("model-info")).to_contain_text("256")  # context length

    page.get_by_label("Mode").select_option("lora")
    page.get_by_label("Batch size").fill("8")
    page.get_by_role("button", name="Estimate").click()
    expect(page.get_by_test_id("memory-estimate")).to_contain_text("total_bytes")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Models").click()
    expect(page.get_by_test_id("models")).to_contain_text("Tiny llama")


@pytest.mark.slow
def test_an_adapter_page_shows_its_own_format_and_lineage_and_its_download_carries_the_card(
        page, client, scientist, viewer, project, tiny_model, qa_version, celery_worker, tmp_path):
    import zipfile

    from apps.training.models import TrainingJob
    from tests.conftest import wait_for
    from tests.training.fixtures import launch_body
    from tests.training.test_jobs_run import assert_card_carries_the_lineage

    client.force_login(scientist)
    launched = client.post(f"/api/projects/{project.pk}/jobs/", launch_body(tiny_model, qa_version, max_steps=10),
                           content_type="application/json")
    assert launched.status_code == 201, launched.content
    job = wait_for(lambda: (j := TrainingJob.objects.get(pk=launched.json()["id"])).state != "queued"
                   and j.state != "running" and j, timeout=180, what="the job to end")
    assert job.state == "succeeded", job.error
    tiny_model.refresh_from_db()

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/jobs/{job.pk}/")
    page.get_by_test_id("adapter").get_by_role("link", name=job.adapter.name).click()
    info = page.get_by_test_id("model-info")
    expect(info.get_by_role("row", name="Format")).to_contain_text("PEFT LoRA adapter (SFT)")
    expect(info).not_to_contain_text("gguf")
    expect(info.get_by_role("row", name="Rank (r) / alpha")).to_contain_text("4 / 8")
    expect(info.get_by_role("row", name="Target modules")).to_contain_text("k_proj, o_proj, q_proj, v_proj")
    expect(page.get_by_test_id("base-content-hash")).to_have_text(tiny_model.content_hash)
    expect(page.get_by_test_id("lineage-content-hash")).to_have_text(qa_version.content_hash)
    expect(page.get_by_test_id("adapter-metrics").get_by_role("row", name="eval_loss", exact=False).filter(
        has=page.get_by_role("rowheader", name="eval_loss", exact=True))).to_contain_text(
        f"{job.metrics['eval_loss']:.4f}")
    expect(page.get_by_test_id("adapter-config").get_by_role("row", name="lora_r")).to_contain_text("4")

    with page.expect_download() as downloaded:
        page.get_by_test_id("adapter-download").click()
    archive = tmp_path / "adapter.zip"
    downloaded.value.save_as(archive)
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(tmp_path / "unzipped")
    (folder,) = [p for p in (tmp_path / "unzipped").iterdir() if p.is_dir()]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model.weights_path), folder)
    assert peft_model.peft_config["default"].r == 4
    job_json = {"id": job.pk, "metrics": job.metrics}
    assert_card_carries_the_lineage(folder, job_json, tiny_model, qa_version)

    page.get_by_test_id("lineage-dataset").click()
    expect(page).to_have_url(f"/projects/{project.pk}/datasets/{qa_version.dataset_id}/versions/1/")
    page.go_back()
    page.get_by_test_id("lineage-job").click()
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded")

    # A viewer sees the lineage but is offered no download (model.download).
    page.context.clear_cookies()
    browser_login(page, viewer.username)
    page.goto(f"/projects/{project.pk}/models/{job.adapter_id}/")
    expect(page.get_by_test_id("lineage-content-hash")).to_have_text(qa_version.content_hash)
    expect(page.get_by_test_id("adapter-download")).to_have_count(0)
    page.goto(f"/projects/{project.pk}/jobs/{job.pk}/")
    expect(page.get_by_test_id("adapter")).not_to_contain_text("download")


@pytest.mark.timeout(300)
def test_a_scientist_exports_a_model_as_gguf_sees_its_check_and_downloads_it(page, scientist, viewer, tiny_model,
                                                                            celery_worker, tmp_path):
    from gguf import GGUFReader

    browser_login(page, viewer.username)  # may see the model, not carry its weights away
    page.goto(f"/projects/{tiny_model.project_id}/models/{tiny_model.pk}/")
    expect(page.get_by_test_id("model-card")).to_be_visible()
    expect(page.get_by_test_id("model-exports")).to_have_count(0)
    page.context.clear_cookies()

    browser_login(page, "sofia")
    page.goto(f"/projects/{tiny_model.project_id}/models/{tiny_model.pk}/")
    page.get_by_label("Export as").select_option("gguf-q8_0")
    page.get_by_role("button", name="Export", exact=True).click()
    expect(page.get_by_test_id("export")).to_contain_text("GGUF")
    filename = f"{tiny_model.name.replace(' ', '_')}-q8_0.gguf"
    link = page.get_by_role("link", name=f"download {filename}")
    expect(link).to_be_visible(timeout=120_000)  # the page follows the job and redraws it when it has ended
    expect(page.get_by_test_id("export-check")).to_contain_text(re.compile(r"checked: .* on 4 prompts"))
    with page.expect_download() as download:
        link.click()
    path = tmp_path / "export.gguf"
    download.value.save_as(path)
    assert GGUFReader(path).fields["general.file_type"].contents() == 7  # MOSTLY_Q8_0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_scientist_measures_the_precisions_and_chooses_one_on_the_model_page(page, scientist, project, tiny_model,
                                                                              inference_worker):
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/models/{tiny_model.pk}/")
    section = page.get_by_test_id("serving-precision")
    expect(section).to_contain_text("Not measured yet")
    expect(page.get_by_test_id("serving-precision-current")).to_have_text("auto")
    section.get_by_role("button", name="Measure precisions").click()
    expect(page.get_by_test_id("precision-measurement")).to_contain_text(re.compile("queued|running|succeeded"))
    page.evaluate("window.stillThisPage = true")
    # The inference worker measures fp32, bf16 and int8; the page follows in place and shows the table.
    table = page.get_by_test_id("precision-table")
    expect(table).to_be_visible(timeout=180_000)
    assert page.evaluate("window.stillThisPage") is True
    expect(page.get_by_test_id("precision-measurement")).to_contain_text("succeeded")
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table.locator("tr[data-precision=fp32]")).to_contain_text("0.00%")
    expect(table.locator("tr[data-precision=int8] td").nth(1)).to_have_text(re.compile(r"^\d+\.\d{3}$"))
    expect(page.get_by_test_id("serving-precision-resolved")).to_have_text(re.compile("^(fp32|bf16|int8)$"))

    page.get_by_label("Serve in").select_option("int8")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("serving-precision-current")).to_have_text("int8")
    tiny_model.refresh_from_db()
    assert tiny_model.serving_precision == "int8"


def test_a_scientist_deletes_an_ended_export_from_the_model_page(page, scientist, viewer, tiny_model):
    from apps.registry.exports import export_folder
    from apps.registry.models import ModelExport

    written = ModelExport.objects.create(model=tiny_model, format="gguf-f16", state="succeeded", steps_done=3,
                                         steps_total=3, size_bytes=2048, write_seconds=1.5,
                                         check_result={"identical": True, "prompts": ["a", "b", "c", "d"]})
    folder = export_folder(written.pk)
    folder.mkdir(parents=True, exist_ok=True)  # an earlier test's export of this id may have left it
    (folder / written.filename).write_bytes(b"GGUF" + bytes(2044))
    written.path = str(folder / written.filename)
    written.save(update_fields=["path"])
    failed = ModelExport.objects.create(model=tiny_model, format="safetensors", state="failed", error="disk full")
    running = ModelExport.objects.create(model=tiny_model, format="gguf-q8_0", state="running", steps_done=1,
                                         steps_total=3)

    browser_login(page, "sofia")
    page.goto(f"/projects/{tiny_model.project_id}/models/{tiny_model.pk}/")
    exports = page.get_by_test_id("export")
    expect(exports).to_have_count(3)
    # Only an export that has ended can go: a running one's worker would write its file afterwards.
    expect(page.locator(f"[data-export-url='/api/model-exports/{running.pk}/'] [data-testid=export-delete]")
           ).to_have_count(0)
    expect(page.get_by_test_id("export-delete")).to_have_count(2)

    page.once("dialog", lambda dialog: dialog.accept())
    exports.filter(has_text="GGUF f16").get_by_role("button", name="Delete").click()
    expect(page.locator(".messages")).to_contain_text("Deleted the GGUF f16 export and its file.")
    expect(exports).to_have_count(2)
    expect(page.get_by_test_id("exports")).not_to_contain_text("GGUF f16")
    expect(page.get_by_test_id("exports")).to_contain_text("disk full")
    assert not folder.exists()
    assert set(ModelExport.objects.values_list("pk", flat=True)) == {failed.pk, running.pk}

    # Declined, nothing is sent.
    page.once("dialog", lambda dialog: dialog.dismiss())
    exports.filter(has_text="safetensors").get_by_role("button", name="Delete").click()
    expect(exports).to_have_count(2)
    assert ModelExport.objects.filter(pk=failed.pk).exists()

    # Who may not carry the weights away sees no exports, so no button.
    page.context.clear_cookies()
    browser_login(page, viewer.username)
    page.goto(f"/projects/{tiny_model.project_id}/models/{tiny_model.pk}/")
    expect(page.get_by_test_id("model-card")).to_be_visible()
    expect(page.get_by_test_id("export-delete")).to_have_count(0)
