from django.db.models import Count
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.comparison import selectors, services
from apps.comparison.models import Comparison
from apps.comparison.serializers import (
    ComparisonCreateSerializer,
    ComparisonSerializer,
    ExportedSerializer,
    ExportSerializer,
    GridSerializer,
    LeaderboardSerializer,
    NextPairSerializer,
    VoteCastSerializer,
    VoteSerializer,
    blind_pair,
    revealed_vote,
)
from apps.core.http import client_ip
from apps.evaluation.selectors import judge_boards
from apps.projects import policy


def _comparison(request: Request, comparison_id: int, permission: str) -> Comparison:
    return policy.get_object(request.user, Comparison, comparison_id, permission, request.auth)


class ProjectComparisonListCreateApi(ListAPIView):
    serializer_class = ComparisonSerializer

    def get_queryset(self):
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], "compare.view", token)
        return (Comparison.objects.filter(project=project).select_related("created_by")
                .prefetch_related("contestants__model", "contestants__provider_model__provider").annotate(prompt_total=Count("prompts")))

    @extend_schema(request=ComparisonCreateSerializer, responses={201: ComparisonSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = ComparisonCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        comparison = services.comparison_create(user=request.user, project=project, token=request.auth,
                                                ip_address=client_ip(request), **data.validated_data)
        return Response(ComparisonSerializer(comparison).data, status=status.HTTP_201_CREATED)


class ProjectLeaderboardApi(APIView):
    """Every vote of every comparison of the project, by model."""

    @extend_schema(responses=LeaderboardSerializer)
    def get(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, "compare.view", request.auth)
        return Response(selectors.project_leaderboard(project))


class ComparisonDetailApi(APIView):
    @extend_schema(responses=ComparisonSerializer)
    def get(self, request: Request, comparison_id: int) -> Response:
        return Response(ComparisonSerializer(_comparison(request, comparison_id, "compare.view")).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.view")
        services.comparison_delete(user=request.user, comparison=comparison, token=request.auth,
                                   ip_address=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ComparisonCancelApi(APIView):
    """A queued comparison ends at once; a running one stops after its current batch."""

    @extend_schema(request=None, responses=ComparisonSerializer)
    def post(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.view")
        comparison = services.comparison_cancel(user=request.user, comparison=comparison, token=request.auth,
                                                ip_address=client_ip(request))
        return Response(ComparisonSerializer(comparison).data)


class ComparisonGridApi(APIView):
    """Prompts, every output with its latency, tokens/s and scores, and per-model summaries."""

    @extend_schema(responses=GridSerializer)
    def get(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.view")
        prompts = [{"id": p.pk, "position": p.position, "text": p.text, "reference": p.reference}
                   for p in comparison.prompts.order_by("position")]
        return Response({"prompts": prompts, "cells": selectors.grid_cells(comparison),
                         "summaries": selectors.model_summaries(comparison)})


class ComparisonLeaderboardApi(APIView):
    @extend_schema(responses=LeaderboardSerializer)
    def get(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.view")
        return Response({**selectors.comparison_leaderboard(comparison), "judges": judge_boards(comparison)})


class NextPairApi(APIView):
    """The next pair for this person to vote on, blind: the prompt and two outputs as A (left)
    and B (right), with no model name or id. The same open pair comes back until it is voted."""

    @extend_schema(request=None, responses=NextPairSerializer)
    def post(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.vote")
        pair = services.pair_next(user=request.user, comparison=comparison, token=request.auth)
        remaining = len(services.votable_pairs(comparison, exclude_voter=request.user))
        return Response({"pair": blind_pair(pair), "voted": selectors.votes_by(comparison, request.user),
                         "remaining": remaining})


class VoteApi(APIView):
    """Vote on a pair served to you: a = left, b = right, tie, both_bad. The answer reveals the
    models. Resending the same vote (a retry) returns it with 200; a different vote on the same
    pair is refused with 409."""

    @extend_schema(request=VoteCastSerializer, responses={201: VoteSerializer, 200: VoteSerializer})
    def post(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.vote")
        data = VoteCastSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        vote, created = services.vote_cast(user=request.user, comparison=comparison, token=request.auth,
                                           pair_id=data.validated_data["pair"], choice=data.validated_data["choice"],
                                           client_id=data.validated_data["client_id"])
        return Response(revealed_vote(vote), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ExportApi(APIView):
    """The votes that prefer one answer, as a new version of a preference dataset."""

    @extend_schema(request=ExportSerializer, responses={201: ExportedSerializer})
    def post(self, request: Request, comparison_id: int) -> Response:
        comparison = _comparison(request, comparison_id, "compare.view")
        data = ExportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        version = services.votes_export(user=request.user, comparison=comparison, token=request.auth,
                                        ip_address=client_ip(request), **data.validated_data)
        return Response({"dataset": version.dataset_id, "version": version.number, "rows": version.row_count,
                         "content_hash": version.content_hash}, status=status.HTTP_201_CREATED)
