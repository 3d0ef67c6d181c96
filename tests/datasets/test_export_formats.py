"""One registry of export formats (workers.ingest.export_formats): the model's choices, the API's
choices and schema, the version page's menu and stream links, and the file names all read it."""

import pytest

from apps.datasets.models import Dataset, ExportJob
from apps.datasets.serializers import VersionExportStartSerializer
from apps.datasets.writer import write_version
from workers.ingest.export_formats import EXPORT_FORMATS, STREAM_FORMATS, choices


def test_the_model_and_the_api_offer_the_registry_formats():
    assert ExportJob._meta.get_field("format").choices == choices()
    assert list(VersionExportStartSerializer().fields["format"].choices) == list(EXPORT_FORMATS)
    assert STREAM_FORMATS == ("jsonl", "csv")
    for fmt in EXPORT_FORMATS.values():
        assert fmt.label and fmt.extension and fmt.content_type and callable(fmt.write)


@pytest.mark.django_db
def test_the_version_page_lists_every_format_and_links_the_streamed_ones(client, scientist, project, owner):
    dataset = Dataset.objects.create(project=project, name="Menu", created_by=owner)
    version = write_version(dataset=dataset, records=[{"prompt": "p", "response": "r"}], author=owner,
                            roles={"prompt": "prompt", "response": "response"})
    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/{version.number}/").content.decode()
    for fmt in EXPORT_FORMATS.values():
        assert f'<option value="{fmt.name}">{fmt.label}</option>' in page
    for name in STREAM_FORMATS:
        assert f'/versions/{version.number}/export.{name}"' in page
    job = ExportJob(version=version, format="datasets")
    assert job.filename == f"Menu-v{version.number}.datasets.zip"
