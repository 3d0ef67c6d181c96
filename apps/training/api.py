from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid
from apps.core.http import client_ip
from apps.core.pagination import MAX_PAGE_SIZE, KeysetPagination
from apps.datasets.models import DatasetVersion
from apps.projects import policy
from apps.training import selectors, services
from apps.training.models import Sweep, TrainingJob
from apps.training.serializers import (
    JobCopySerializer,
    JobLaunchSerializer,
    JobSerializer,
    MetricPointSerializer,
    MetricsQuerySerializer,
    SweepLaunchSerializer,
    SweepSerializer,
)

IDEMPOTENCY = OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
                               description="a replay with the same key and body returns the first job")


class ProjectJobListLaunchApi(ListAPIView):
    serializer_class = JobSerializer

    def get_queryset(self):
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], "job.view", token)
        return TrainingJob.objects.filter(project=project).select_related("created_by")

    @extend_schema(request=JobLaunchSerializer, responses={201: JobSerializer}, parameters=[IDEMPOTENCY])
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = JobLaunchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job, _ = services.job_launch(user=request.user, project=project, token=request.auth,
                                     ip_address=client_ip(request),
                                     idempotency_key=request.headers.get("Idempotency-Key", ""),
                                     **_by_version_id(project, data.validated_data))
        return Response(JobSerializer(job, context={"request": request}).data, status=status.HTTP_201_CREATED)


def _by_version_id(project, data: dict) -> dict:
    """A version named by its dataset and number (as every URL names it) becomes its id; the
    service then checks it as any id (ready, in this project, readable by the caller)."""
    data = dict(data)
    if "dataset_version" not in data:
        dataset, number = data.pop("dataset"), data.pop("version")
        found = DatasetVersion.objects.filter(dataset_id=dataset, number=number, dataset__project=project).values_list(
            "pk", flat=True).first()
        if found is None:
            raise Invalid("No such version of that dataset in this project.", field="version")
        data["dataset_version"] = found
    return data


class JobEstimateApi(APIView):
    """Everything a launch checks, and the memory and time it will take, without launching."""

    @extend_schema(request=JobLaunchSerializer, responses=dict)
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = JobLaunchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(services.job_estimate(user=request.user, project=project, token=request.auth,
                                              **_by_version_id(project, data.validated_data)))


class JobDetailApi(APIView):
    @extend_schema(responses=JobSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = policy.get_object(request.user, TrainingJob, job_id, "job.view", request.auth)
        return Response(JobSerializer(job, context={"request": request}).data)


class JobCancelApi(APIView):
    """A queued job ends at once; a running one stops before its next optimizer step."""

    @extend_schema(request=None, responses=JobSerializer)
    def post(self, request: Request, job_id: int) -> Response:
        return _transition(request, job_id, services.job_cancel)


class JobResumeApi(APIView):
    """A failed or cancelled job is queued again and continues from its last checkpoint."""

    @extend_schema(request=None, responses=JobSerializer)
    def post(self, request: Request, job_id: int) -> Response:
        return _transition(request, job_id, services.job_resume)


def _transition(request: Request, job_id: int, service) -> Response:
    job = policy.get_object(request.user, TrainingJob, job_id, "job.view", request.auth)
    job = service(user=request.user, job=job, token=request.auth, ip_address=client_ip(request))
    return Response(JobSerializer(job, context={"request": request}).data)


class JobCopyApi(APIView):
    """A new job with this one's inputs and config: unchanged ("reproduce") or edited."""

    @extend_schema(request=JobCopySerializer, responses={201: JobSerializer})
    def post(self, request: Request, job_id: int) -> Response:
        job = policy.get_object(request.user, TrainingJob, job_id, "job.view", request.auth)
        data = JobCopySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        copy = services.job_copy(user=request.user, job=job, token=request.auth, ip_address=client_ip(request),
                                 **data.validated_data)
        return Response(JobSerializer(copy, context={"request": request}).data, status=status.HTTP_201_CREATED)


class MetricPagination(KeysetPagination):
    key = ("step", "kind")
    after_param = "after_step"  # the step to continue after, as the API took it before cursors
    default_limit = MAX_PAGE_SIZE  # points are small, and a chart wants them all


class JobMetricsApi(ListAPIView):
    """The job's metric points ordered by step; follow `next` for newer ones as the job reports them."""

    serializer_class = MetricPointSerializer
    pagination_class = MetricPagination

    @extend_schema(parameters=[MetricsQuerySerializer])
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        job = policy.get_object(self.request.user, TrainingJob, self.kwargs["job_id"], "job.view", self.request.auth)
        query = MetricsQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return selectors.job_points(job, kind=query.validated_data["kind"])


class ProjectSweepListLaunchApi(ListAPIView):
    """A project's sweeps, newest first; POST launches one: up to max_jobs fine-tunes over a grid or a
    seeded random sample of `space`, checked whole (every config, the quotas, the GPU-hour budget) before
    any job is created."""

    serializer_class = SweepSerializer

    def get_queryset(self):
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], "job.view", token)
        return Sweep.objects.filter(project=project).select_related("created_by")

    @extend_schema(request=SweepLaunchSerializer, responses={201: SweepSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = SweepLaunchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        sweep, _ = services.sweep_launch(user=request.user, project=project, token=request.auth,
                                         ip_address=client_ip(request), **_by_version_id(project, data.validated_data))
        return Response(SweepSerializer(sweep).data, status=status.HTTP_201_CREATED)


class SweepDetailApi(APIView):
    """The sweep with its jobs ranked by eval loss (lowest first)."""

    @extend_schema(responses=SweepSerializer)
    def get(self, request: Request, sweep_id: int) -> Response:
        sweep = policy.get_object(request.user, Sweep, sweep_id, "job.view", request.auth)
        return Response(SweepSerializer(sweep).data)


class SweepCancelApi(APIView):
    """Cancels every job of the sweep not yet ended: queued ones at once, running ones at their next step."""

    @extend_schema(request=None, responses=SweepSerializer)
    def post(self, request: Request, sweep_id: int) -> Response:
        sweep = policy.get_object(request.user, Sweep, sweep_id, "job.view", request.auth)
        sweep = services.sweep_cancel(user=request.user, sweep=sweep, token=request.auth, ip_address=client_ip(request))
        return Response(SweepSerializer(sweep).data)
