from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid, NotFound, PermissionDenied
from apps.core.http import client_ip
from apps.core.pagination import KeysetPagination, NewestFirstPagination
from apps.datasets import exports, selectors, services
from apps.datasets.models import Dataset, DatasetRow, DatasetVersion, DeriveJob, ExportJob, ImportJob
from apps.datasets.serializers import (
    DatasetCreateSerializer,
    DatasetSerializer,
    DeriveJobSerializer,
    EditSerializer,
    ExportJobSerializer,
    ImportCreateSerializer,
    ImportSerializer,
    ImportStartSerializer,
    RowSerializer,
    SplitSerializer,
    VersionExportStartSerializer,
    VersionSerializer,
)
from apps.projects import policy
from apps.projects.audit import audit_record
from workers.ingest.export_formats import EXPORT_FORMATS, STREAM_FORMATS, names_in_words


class ProjectDatasetListCreateApi(ListAPIView):
    serializer_class = DatasetSerializer

    def get_queryset(self):
        """All the project's datasets for a role with `dataset.view`; otherwise the ones granted
        to this member one by one; 403 when that is none."""
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], token=token)
        datasets = policy.visible_in_project(user, Dataset, project, "dataset.view", token)
        if not policy.can(user, "dataset.view", project, token) and not datasets.exists():
            raise PermissionDenied("dataset.view")
        return datasets.order_by("name", "id")

    @extend_schema(request=DatasetCreateSerializer, responses={201: DatasetSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = DatasetCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dataset = services.dataset_create(user=request.user, project=project, token=request.auth,
                                          ip_address=client_ip(request), **data.validated_data)
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetailApi(APIView):
    @extend_schema(responses=DatasetSerializer)
    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth)
        return Response(DatasetSerializer(dataset).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, dataset_id: int) -> Response:
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth)
        services.dataset_delete(user=request.user, dataset=dataset, token=request.auth, ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SharedDatasetListApi(ListAPIView):
    """Datasets granted to me one by one, across projects."""

    serializer_class = DatasetSerializer

    def get_queryset(self):
        token = self.request.auth
        datasets = policy.shared_with(self.request.user, Dataset, "dataset.view", token)
        return datasets.order_by("name", "id")


# --- imports ------------------------------------------------------------------------------------

def _import_job(request: Request, import_id: int) -> ImportJob:
    job = ImportJob.objects.select_related("dataset__project", "version").filter(
        pk=import_id, dataset__deleted_at__isnull=True).first()
    if job is None:
        raise NotFound()
    policy.require(request.user, "dataset.view", job.dataset, request.auth)
    return job


class ImportCreateApi(APIView):
    """Upload a file (multipart `file`) or name a server-side path inside the data roots.
    Answers with the draft import and a preview: columns, first rows, suggested mapping."""

    parser_classes = [MultiPartParser, JSONParser]

    @extend_schema(request=ImportCreateSerializer, responses={201: ImportSerializer})
    def post(self, request: Request, project_id: int, dataset_id: int) -> Response:
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth,
                                    project_id=project_id)
        data = ImportCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.import_create(user=request.user, dataset=dataset, upload=data.validated_data.get("file"),
                                     server_path=data.validated_data.get("server_path", ""), token=request.auth,
                                     ip_address=client_ip(request))
        body = ImportSerializer(job).data | {"preview": services.import_preview(job=job)}
        return Response(body, status=status.HTTP_201_CREATED)


class ImportDetailApi(APIView):
    @extend_schema(responses=ImportSerializer)
    def get(self, request: Request, import_id: int) -> Response:
        return Response(ImportSerializer(_import_job(request, import_id)).data)


class ImportStartApi(APIView):
    @extend_schema(request=ImportStartSerializer, responses=ImportSerializer)
    def post(self, request: Request, import_id: int) -> Response:
        job = _import_job(request, import_id)
        data = ImportStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.import_start(user=request.user, job=job, token=request.auth, ip_address=client_ip(request),
                                    **data.validated_data)
        return Response(ImportSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class ImportCancelApi(APIView):
    @extend_schema(request=None, responses=ImportSerializer)
    def post(self, request: Request, import_id: int) -> Response:
        job = services.import_cancel(user=request.user, job=_import_job(request, import_id), token=request.auth,
                                     ip_address=client_ip(request))
        return Response(ImportSerializer(job).data, status=status.HTTP_202_ACCEPTED)


# --- versions and rows --------------------------------------------------------------------------

def _version(request: Request, dataset_id: int, number: int) -> DatasetVersion:
    dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth)
    version = selectors.ready_versions(dataset).filter(number=number).first()
    if version is None:
        raise NotFound()
    return version


class VersionListApi(ListAPIView):
    serializer_class = VersionSerializer

    def get_queryset(self):
        dataset = policy.get_object(self.request.user, Dataset, self.kwargs["dataset_id"], "dataset.view",
                                    self.request.auth)
        return selectors.history(dataset)


class VersionDetailApi(APIView):
    """One version (ready or purged); DELETE purges its rows for good unless a fine-tune, a
    comparison or an annotation campaign uses it (409 naming them)."""

    @extend_schema(responses={200: VersionSerializer})
    def get(self, request: Request, dataset_id: int, number: int) -> Response:
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.view", request.auth)
        version = selectors.history(dataset).filter(number=number).first()
        if version is None:
            raise NotFound()
        return Response(VersionSerializer(version).data)

    @extend_schema(responses={202: DeriveJobSerializer})
    def delete(self, request: Request, dataset_id: int, number: int) -> Response:
        version = _version(request, dataset_id, number)
        job = services.version_purge_start(user=request.user, version=version, token=request.auth,
                                           ip_address=client_ip(request))
        return Response(DeriveJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class RowPagination(KeysetPagination):
    key = ("position",)
    after_param = "after"  # the position to continue after, as the API took it before cursors
    after_field_in_response = "next_after"
    default_limit = selectors.PAGE_ROWS


class RowListApi(ListAPIView):
    """Rows of a version in order; follow `next` for the following page."""

    serializer_class = RowSerializer
    pagination_class = RowPagination
    queryset = DatasetRow.objects.none()  # rows come from selectors.version_rows, which pages them itself

    @extend_schema(parameters=[
        OpenApiParameter("q", str, description="words to search for"),
        OpenApiParameter("label", str), OpenApiParameter("split", str),
        OpenApiParameter("meta_key", str, description="a metadata field of the version"),
        OpenApiParameter("meta_value", str, description="rows whose meta_key field is this text")])
    def get(self, request: Request, dataset_id: int, number: int) -> Response:
        version = _version(request, dataset_id, number)
        params = request.query_params
        after = self.paginator.start(request, DatasetRow)
        rows, next_after = selectors.version_rows(version=version, after=after[0] if after else None,
                                                  q=params.get("q", "")[:500], label=params.get("label", "")[:200],
                                                  split=params.get("split", "")[:16], limit=self.paginator.limit,
                                                  meta=_meta_filter(version, params))
        page = self.paginator.finish(rows, more=next_after is not None)
        return self.get_paginated_response(RowSerializer(page, many=True).data)


def _meta_filter(version, params) -> tuple[str, str] | None:
    key = params.get("meta_key", "")
    if not key:
        return None
    if key not in version.schema.get("metadata_keys", []):
        raise Invalid(f"Version {version.number} has no metadata field {key[:100]!r}.", field="meta_key")
    return key, params.get("meta_value", "")[:1000]


class VersionExportApi(APIView):
    """Stream a version as JSONL or CSV (CSV cells that start like a formula are neutralised)."""

    @extend_schema(responses={(200, EXPORT_FORMATS[name].content_type.split(";")[0]): str for name in STREAM_FORMATS})
    def get(self, request: Request, dataset_id: int, number: int, export_format: str):
        if export_format not in STREAM_FORMATS:
            raise NotFound(f"Export formats are {names_in_words(STREAM_FORMATS)}.")
        dataset = policy.get_object(request.user, Dataset, dataset_id, "dataset.export", request.auth)
        version = selectors.ready_versions(dataset).filter(number=number).first()
        if version is None:
            raise NotFound()
        audit_record(actor=request.user, action="dataset.export", project=dataset.project, target=dataset,
                     ip_address=client_ip(request), after={"version": number, "format": export_format})
        return exports.version_export_response(version, export_format)


class VersionSplitApi(APIView):
    """Queue a new version with a seeded train/validation/test split of this one."""

    @extend_schema(request=SplitSerializer, responses={202: DeriveJobSerializer})
    def post(self, request: Request, dataset_id: int, number: int) -> Response:
        version = _version(request, dataset_id, number)
        data = SplitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.version_split_start(user=request.user, version=version, token=request.auth,
                                           ip_address=client_ip(request), **data.validated_data)
        return Response(DeriveJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class VersionEditApi(APIView):
    """Queue a new version with some rows fixed and some dropped (rows never change in place)."""

    @extend_schema(request=EditSerializer, responses={202: DeriveJobSerializer})
    def post(self, request: Request, dataset_id: int, number: int) -> Response:
        version = _version(request, dataset_id, number)
        data = EditSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.version_edit_start(user=request.user, version=version, token=request.auth,
                                          ip_address=client_ip(request), **data.validated_data)
        return Response(DeriveJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class VersionExportJobsApi(ListAPIView):
    """Export a version as a file written by a worker (jsonl, csv, parquet, or a zipped `datasets`
    directory that datasets.load_from_disk reads), downloaded when done; GET lists them, newest first."""

    serializer_class = ExportJobSerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        version = _version(self.request, self.kwargs["dataset_id"], self.kwargs["number"])
        policy.require(self.request.user, "dataset.export", version.dataset, self.request.auth)
        return version.exports.select_related("version")

    @extend_schema(request=VersionExportStartSerializer, responses={202: ExportJobSerializer})
    def post(self, request: Request, dataset_id: int, number: int) -> Response:
        version = _version(request, dataset_id, number)
        data = VersionExportStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.export_start(user=request.user, version=version, export_format=data.validated_data["format"],
                                    token=request.auth, ip_address=client_ip(request))
        return Response(ExportJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


def _export_job(request: Request, export_id) -> ExportJob:
    job = ExportJob.objects.select_related("version__dataset__project").filter(pk=export_id).first()
    if job is None:
        raise NotFound()
    policy.require(request.user, "dataset.export", job.version.dataset, request.auth)
    return job


class ExportJobApi(APIView):
    @extend_schema(responses=ExportJobSerializer)
    def get(self, request: Request, export_id: int) -> Response:
        return Response(ExportJobSerializer(_export_job(request, export_id)).data)


class ExportDownloadApi(APIView):
    @extend_schema(responses={(200, "application/octet-stream"): bytes})
    def get(self, request: Request, export_id: int):
        from django.http import FileResponse

        job = _export_job(request, export_id)
        if job.state != ExportJob.State.SUCCEEDED:
            raise Invalid(f"This export is {job.state}; download it once it has succeeded.", field="state")
        return FileResponse(open(job.path, "rb"), as_attachment=True, filename=job.filename)


class VersionPiiScanApi(APIView):
    """Queue a PII scan of this version (e-mails, phones, cards, IPs, IBANs, secrets)."""

    @extend_schema(request=None, responses={202: DeriveJobSerializer})
    def post(self, request: Request, dataset_id: int, number: int) -> Response:
        job = services.version_pii_scan_start(user=request.user, version=_version(request, dataset_id, number),
                                              token=request.auth, ip_address=client_ip(request))
        return Response(DeriveJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class VersionRedactApi(APIView):
    """Queue a new version with PII replaced by typed placeholders ([EMAIL], [PHONE], …)."""

    @extend_schema(request=None, responses={202: DeriveJobSerializer})
    def post(self, request: Request, dataset_id: int, number: int) -> Response:
        job = services.version_redact_start(user=request.user, version=_version(request, dataset_id, number),
                                            token=request.auth, ip_address=client_ip(request))
        return Response(DeriveJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class DeriveJobDetailApi(APIView):
    @extend_schema(responses=DeriveJobSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = DeriveJob.objects.select_related("parent__dataset__project", "version").filter(pk=job_id).first()
        if job is None:
            raise NotFound()
        policy.require(request.user, "dataset.view", job.parent.dataset, request.auth)
        return Response(DeriveJobSerializer(job).data)
