"""The judges and eval suites API. Judges: define them, see what a run would cost, launch it over a comparison, watch
it, cancel it, read its results and its agreement with people."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.comparison.models import Comparison
from apps.core.errors import Invalid
from apps.core.http import client_ip
from apps.evaluation import selectors, services
from apps.evaluation.models import EvalRun, EvalSuite, Judge, JudgeRun, TeacherRun
from apps.evaluation.serializers import (
    CalibrationPolicySerializer,
    EstimateSerializer,
    EvalRunDetailSerializer,
    EvalRunSerializer,
    EvalSuiteCreateSerializer,
    EvalSuiteSerializer,
    JudgeCreateSerializer,
    JudgeRunDetailSerializer,
    JudgeRunSerializer,
    JudgeSerializer,
    JudgeSourceSerializer,
    ModelChoiceSerializer,
    NextOutputSerializer,
    NextRowPairSerializer,
    NextRowSerializer,
    PreferenceSerializer,
    RatingSerializer,
    RatingSubmitSerializer,
    RowPreferenceColumnsSerializer,
    RowPreferenceSubmitSerializer,
    RowRatingColumnsSerializer,
    RowRatingSubmitSerializer,
    TeacherEstimateSerializer,
    TeacherRunRequestSerializer,
    TeacherRunSerializer,
    blind_output,
    blind_pair,
    blind_row,
)
from apps.projects import policy


def _judge(request: Request, project_id: int, judge_id: int) -> Judge:
    return policy.get_object(request.user, Judge, judge_id, "compare.view", request.auth, project_id=project_id,
                             related=("local_model", "provider_model__provider"))


def _run(request: Request, project_id: int, run_id: int) -> JudgeRun:
    return policy.get_object(request.user, JudgeRun, run_id, "compare.view", request.auth, project_id=project_id,
                             related=("judge", "comparison", "dataset_version__dataset"))


class JudgeListCreateApi(ListAPIView):
    serializer_class = JudgeSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "compare.view", self.request.auth)
        return selectors.project_judges(project)

    @extend_schema(request=JudgeCreateSerializer, responses={201: JudgeSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = JudgeCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        judge = services.judge_create(user=request.user, project=project, token=request.auth,
                                      ip_address=client_ip(request), **data.validated_data)
        return Response(JudgeSerializer(judge).data, status=status.HTTP_201_CREATED)


class JudgeDetailApi(APIView):
    @extend_schema(responses=JudgeSerializer)
    def get(self, request: Request, project_id: int, judge_id: int) -> Response:
        return Response(JudgeSerializer(_judge(request, project_id, judge_id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, project_id: int, judge_id: int) -> Response:
        services.judge_delete(user=request.user, judge=_judge(request, project_id, judge_id), token=request.auth,
                              ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class JudgeEstimateApi(APIView):
    """What a run over the comparison (or the dataset version's rows) would take, before it is
    launched: calls and tokens."""

    @extend_schema(request=JudgeSourceSerializer, responses=EstimateSerializer)
    def post(self, request: Request, project_id: int, judge_id: int) -> Response:
        judge = _judge(request, project_id, judge_id)
        data = JudgeSourceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(services.judge_run_estimate(user=request.user, judge=judge, token=request.auth,
                                                    **data.validated_data))


class JudgeRunListApi(ListAPIView):
    serializer_class = JudgeRunSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "compare.view", self.request.auth)
        return selectors.project_runs(project)


class JudgeRunLaunchApi(APIView):
    """Launch a run over a comparison's outputs, or over a dataset version's rows (a prompt column
    and one response column, pointwise, or two, pairwise)."""

    @extend_schema(request=JudgeSourceSerializer, responses={201: JudgeRunSerializer})
    def post(self, request: Request, project_id: int, judge_id: int) -> Response:
        judge = _judge(request, project_id, judge_id)
        data = JudgeSourceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.judge_run_start(user=request.user, judge=judge, token=request.auth,
                                       ip_address=client_ip(request), **data.validated_data)
        return Response(JudgeRunSerializer(run).data, status=status.HTTP_201_CREATED)


class JudgeRunDetailApi(APIView):
    @extend_schema(responses=JudgeRunDetailSerializer)
    def get(self, request: Request, project_id: int, run_id: int) -> Response:
        return Response(JudgeRunDetailSerializer(_run(request, project_id, run_id)).data)


class JudgeRunCancelApi(APIView):
    """A queued run ends at once; a running one stops after the item it is judging."""

    @extend_schema(request=None, responses=JudgeRunSerializer)
    def post(self, request: Request, project_id: int, run_id: int) -> Response:
        run = services.judge_run_cancel(user=request.user, run=_run(request, project_id, run_id), token=request.auth,
                                        ip_address=client_ip(request))
        return Response(JudgeRunSerializer(run).data)


class CalibrationPolicyApi(APIView):
    """How well a judge must agree with the project's people (kappa over the blind votes, and how
    many items) to count as calibrated; a judge short of it is marked not calibrated. Changing it
    needs project.edit."""

    @extend_schema(responses={200: CalibrationPolicySerializer})
    def get(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, "compare.view", request.auth)
        return Response(CalibrationPolicySerializer(selectors.calibration_policy(project)).data)

    @extend_schema(request=CalibrationPolicySerializer, responses={200: CalibrationPolicySerializer})
    def patch(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        if not isinstance(request.data, dict):
            raise Invalid("the body is a JSON object of settings", field="body")
        rules = services.calibration_policy_update(user=request.user, project=project, token=request.auth,
                                                   ip_address=client_ip(request), **request.data)
        return Response(CalibrationPolicySerializer(rules).data)


# --- people's ratings of outputs for a pointwise judge --------------------------------------------

def _rating_scope(request: Request, project_id: int, judge_id: int, comparison_id: int) -> tuple[Judge, Comparison]:
    """The judge and the comparison, for someone who may vote on it: raters work blind, as voters."""
    judge = policy.get_object(request.user, Judge, judge_id, "compare.vote", request.auth, project_id=project_id)
    comparison = policy.get_object(request.user, Comparison, comparison_id, "compare.vote", request.auth,
                                   project_id=project_id)
    return judge, comparison


class RatingNextApi(APIView):
    """The next output of the comparison for you to rate on the judge's rubric, blind: the prompt
    and the output, no model. The least-rated outputs come first."""

    @extend_schema(responses=NextOutputSerializer)
    def get(self, request: Request, project_id: int, judge_id: int, comparison_id: int) -> Response:
        judge, comparison = _rating_scope(request, project_id, judge_id, comparison_id)
        found = services.rating_next(user=request.user, judge=judge, comparison=comparison, token=request.auth)
        return Response({**found, "output": blind_output(found["output"]),
                         "criteria": judge.rubric["criteria"]})


class RatingApi(APIView):
    """Rate one output on the judge's rubric: a score (1-5, or pass/fail) and a reason for every
    criterion. Rating the same output again replaces your rating (200)."""

    @extend_schema(request=RatingSubmitSerializer, responses={201: RatingSerializer, 200: RatingSerializer})
    def post(self, request: Request, project_id: int, judge_id: int, comparison_id: int) -> Response:
        judge, comparison = _rating_scope(request, project_id, judge_id, comparison_id)
        data = RatingSubmitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rating, created = services.rating_submit(user=request.user, judge=judge, comparison=comparison,
                                                 token=request.auth, **data.validated_data)
        return Response(RatingSerializer(rating).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RowRatingNextApi(APIView):
    """The next row of the dataset version for you to rate on the judge's rubric, blind: its
    prompt and response, read in the columns a run of the judge over the version reads
    (?prompt_column=&response_column=, by default prompt and response). Needs what voters need
    and dataset.view on the version's dataset."""

    @extend_schema(parameters=[RowRatingColumnsSerializer], responses=NextRowSerializer)
    def get(self, request: Request, project_id: int, judge_id: int, version_id: int) -> Response:
        judge = policy.get_object(request.user, Judge, judge_id, "compare.vote", request.auth, project_id=project_id)
        columns = RowRatingColumnsSerializer(data=request.query_params)
        columns.is_valid(raise_exception=True)
        found = services.row_rating_next(user=request.user, judge=judge, version=version_id, token=request.auth,
                                         **columns.validated_data)
        return Response({**found, "row": blind_row(found["row"]), "criteria": judge.rubric["criteria"]})


class RowRatingApi(APIView):
    """Rate one row's response of the dataset version on the judge's rubric: a score and a reason
    for every criterion. Rating the same row (in the same columns) again replaces your rating (200)."""

    @extend_schema(request=RowRatingSubmitSerializer, responses={201: RatingSerializer, 200: RatingSerializer})
    def post(self, request: Request, project_id: int, judge_id: int, version_id: int) -> Response:
        judge = policy.get_object(request.user, Judge, judge_id, "compare.vote", request.auth, project_id=project_id)
        data = RowRatingSubmitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rating, created = services.row_rating_submit(user=request.user, judge=judge, version=version_id,
                                                     token=request.auth, **data.validated_data)
        return Response(RatingSerializer(rating).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RowPreferenceNextApi(APIView):
    """The next row of the dataset version for you to choose on for a pairwise judge, blind: its
    prompt and its two responses as A and B in an order random to you, read in the columns a run
    of the judge over the version reads (?prompt_column=&response_column=&second_response_column=).
    The rows with fewest preferences come first. Who may: as for row ratings."""

    @extend_schema(parameters=[RowPreferenceColumnsSerializer], responses=NextRowPairSerializer)
    def get(self, request: Request, project_id: int, judge_id: int, version_id: int) -> Response:
        judge = policy.get_object(request.user, Judge, judge_id, "compare.vote", request.auth, project_id=project_id)
        columns = RowPreferenceColumnsSerializer(data=request.query_params)
        columns.is_valid(raise_exception=True)
        found = services.row_preference_next(user=request.user, judge=judge, version=version_id, token=request.auth,
                                             **columns.validated_data)
        return Response({**found, "row": blind_pair(found["row"])})


class RowPreferenceApi(APIView):
    """Choose which of a row's two responses is better (a or b, as shown by preferences/next/, or
    tie). Choosing on the same row (in the same columns) again replaces your preference (200)."""

    @extend_schema(request=RowPreferenceSubmitSerializer, responses={201: PreferenceSerializer,
                                                                     200: PreferenceSerializer})
    def post(self, request: Request, project_id: int, judge_id: int, version_id: int) -> Response:
        judge = policy.get_object(request.user, Judge, judge_id, "compare.vote", request.auth, project_id=project_id)
        data = RowPreferenceSubmitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        preference, created = services.row_preference_submit(user=request.user, judge=judge, version=version_id,
                                                             token=request.auth, **data.validated_data)
        return Response(PreferenceSerializer(preference).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


# --- eval suites ----------------------------------------------------------------------------------

def _suite(request: Request, project_id: int, suite_id: int) -> EvalSuite:
    return policy.get_object(request.user, EvalSuite, suite_id, "compare.view", request.auth, project_id=project_id,
                             related=("dataset_version", "baseline_model"))


def _eval_run(request: Request, project_id: int, run_id: int) -> EvalRun:
    return policy.get_object(request.user, EvalRun, run_id, "compare.view", request.auth, project_id=project_id,
                             related=("suite", "model"))


class EvalSuiteListCreateApi(ListAPIView):
    serializer_class = EvalSuiteSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "compare.view", self.request.auth)
        return selectors.project_suites(project)

    @extend_schema(request=EvalSuiteCreateSerializer, responses={201: EvalSuiteSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = EvalSuiteCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        suite = services.eval_suite_create(user=request.user, project=project, token=request.auth,
                                           ip_address=client_ip(request), **data.validated_data)
        return Response(EvalSuiteSerializer(suite).data, status=status.HTTP_201_CREATED)


class EvalSuiteDetailApi(APIView):
    @extend_schema(responses=EvalSuiteSerializer)
    def get(self, request: Request, project_id: int, suite_id: int) -> Response:
        return Response(EvalSuiteSerializer(_suite(request, project_id, suite_id)).data)


class EvalRunLaunchApi(APIView):
    @extend_schema(request=ModelChoiceSerializer, responses={201: EvalRunSerializer})
    def post(self, request: Request, project_id: int, suite_id: int) -> Response:
        suite = _suite(request, project_id, suite_id)
        data = ModelChoiceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.eval_run_start(user=request.user, suite=suite, model=data.validated_data["model"],
                                      token=request.auth, ip_address=client_ip(request))
        return Response(EvalRunSerializer(run).data, status=status.HTTP_201_CREATED)


class EvalRunListApi(ListAPIView):
    serializer_class = EvalRunSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "compare.view", self.request.auth)
        return selectors.project_eval_runs(project)


class EvalRunDetailApi(APIView):
    @extend_schema(responses=EvalRunDetailSerializer)
    def get(self, request: Request, project_id: int, run_id: int) -> Response:
        return Response(EvalRunDetailSerializer(_eval_run(request, project_id, run_id)).data)


class EvalRunCancelApi(APIView):
    """A queued run ends at once; a running one stops after the batch in hand."""

    @extend_schema(request=None, responses=EvalRunSerializer)
    def post(self, request: Request, project_id: int, run_id: int) -> Response:
        run = services.eval_run_cancel(user=request.user, run=_eval_run(request, project_id, run_id),
                                       token=request.auth, ip_address=client_ip(request))
        return Response(EvalRunSerializer(run).data)


def _teacher_run(request: Request, project_id: int, run_id: int) -> TeacherRun:
    return policy.get_object(request.user, TeacherRun, run_id, "dataset.view", request.auth, project_id=project_id,
                             related=("source_version__dataset", "version"))


def _teacher_request(request: Request) -> dict:
    if not isinstance(request.data, dict):
        raise Invalid("the body is a JSON object", field="body")
    data = TeacherRunRequestSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    return data.validated_data


class TeacherRunListLaunchApi(ListAPIView):
    """Teacher runs (distillation): a model answers every prompt of a dataset version and the
    answers become the dataset's next version."""

    serializer_class = TeacherRunSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "dataset.view", self.request.auth)
        return selectors.project_teacher_runs(project)

    @extend_schema(request=TeacherRunRequestSerializer, responses={201: TeacherRunSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        run = services.teacher_run_start(user=request.user, project=project, token=request.auth,
                                         ip_address=client_ip(request), **_teacher_request(request))
        return Response(TeacherRunSerializer(run).data, status=status.HTTP_201_CREATED)


class TeacherEstimateApi(APIView):
    """What a teacher run would take, before it is launched: rows, calls, tokens, the most it can cost."""

    @extend_schema(request=TeacherRunRequestSerializer, responses=TeacherEstimateSerializer)
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        return Response(services.teacher_run_estimate(user=request.user, project=project, token=request.auth,
                                                      **_teacher_request(request)))


class TeacherRunDetailApi(APIView):
    @extend_schema(responses=TeacherRunSerializer)
    def get(self, request: Request, project_id: int, run_id: int) -> Response:
        return Response(TeacherRunSerializer(_teacher_run(request, project_id, run_id)).data)


class TeacherRunCancelApi(APIView):
    """A queued run ends at once; a running one stops after the round in hand, and writes no version."""

    @extend_schema(request=None, responses=TeacherRunSerializer)
    def post(self, request: Request, project_id: int, run_id: int) -> Response:
        run = services.teacher_run_cancel(user=request.user, run=_teacher_run(request, project_id, run_id),
                                          token=request.auth, ip_address=client_ip(request))
        return Response(TeacherRunSerializer(run).data)
