"""The annotation API: everything the pages do, for outside tools too."""

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.annotation import exports, quality, selectors, services
from apps.annotation.models import Annotation, AnnotationExport, LabelSchema
from apps.annotation.serializers import (
    AnnotationExportSerializer,
    AnnotationPayloadSerializer,
    CampaignCreateSerializer,
    CampaignSerializer,
    DraftSerializer,
    EditSerializer,
    ExportStartSerializer,
    LabelSchemaSerializer,
    LabelSchemaWriteSerializer,
    ReviewItemSerializer,
    ReviewSerializer,
    SkipSerializer,
    SubmitSerializer,
    ValuesSerializer,
)
from apps.core.errors import Invalid, NotFound
from apps.core.http import client_ip
from apps.core.pagination import KeysetPagination, NewestFirstPagination
from apps.projects import policy
from workers.ingest.export_formats import STREAM_FORMATS, names_in_words


def _valid(serializer_class, request: Request) -> dict:
    data = serializer_class(data=request.data)
    data.is_valid(raise_exception=True)
    return data.validated_data


class ProjectSchemasApi(ListAPIView):
    serializer_class = LabelSchemaSerializer

    def get_queryset(self):
        project = policy.get_project(self.request.user, self.kwargs["project_id"], "campaign.manage",
                                     self.request.auth)
        return LabelSchema.objects.filter(project=project).order_by("name", "-version", "id")

    @extend_schema(request=LabelSchemaWriteSerializer, responses={201: LabelSchemaSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        data = _valid(LabelSchemaWriteSerializer, request)
        schema = services.schema_create(user=request.user, project=project, name=data.get("name", ""),
                                        fields=data["fields"], token=request.auth, ip_address=client_ip(request))
        return Response(LabelSchemaSerializer(schema).data, status=status.HTTP_201_CREATED)


class SchemaDetailApi(APIView):
    @extend_schema(request=LabelSchemaWriteSerializer, responses=LabelSchemaSerializer)
    def patch(self, request: Request, schema_id: int) -> Response:
        schema = policy.get_object(request.user, LabelSchema, schema_id, "campaign.manage", request.auth)
        data = _valid(LabelSchemaWriteSerializer, request)
        schema = services.schema_update(user=request.user, schema=schema, fields=data["fields"], token=request.auth,
                                        ip_address=client_ip(request))
        return Response(LabelSchemaSerializer(schema).data)


class ProjectCampaignsApi(ListAPIView):
    serializer_class = CampaignSerializer

    def get_queryset(self):
        user, token = self.request.user, self.request.auth
        project = policy.get_project(user, self.kwargs["project_id"], token=token)
        campaigns = services.visible_campaigns(user, project, token).select_related("schema")
        return campaigns.prefetch_related("assignees").order_by("-created_at", "-id")

    @extend_schema(request=CampaignCreateSerializer, responses={201: CampaignSerializer})
    def post(self, request: Request, project_id: int) -> Response:
        project = policy.get_project(request.user, project_id, token=request.auth)
        policy.require(request.user, "campaign.manage", project, request.auth)
        data = _valid(CampaignCreateSerializer, request)
        campaign = services.campaign_create(
            user=request.user, project=project, name=data["name"], dataset_version_id=data["dataset_version"],
            schema_id=data["schema"], guidelines=data["guidelines"], overlap=data["overlap"],
            assignees=data["assignees"], due_at=data["due_at"], lease_seconds=data["lease_seconds"],
            split=data["split"], label=data["label"], sample=data["sample"], seed=data["seed"],
            meta_key=data["meta_key"], meta_value=data["meta_value"],
            suggestion_model_id=data["suggestion_model"], order=data["order"], token=request.auth,
            ip_address=client_ip(request))
        return Response(CampaignSerializer(campaign).data, status=status.HTTP_201_CREATED)


class CampaignDetailApi(APIView):
    @extend_schema(responses=CampaignSerializer)
    def get(self, request: Request, campaign_id: int) -> Response:
        campaign = services.visible_campaign(request.user, campaign_id, request.auth)
        return Response({**CampaignSerializer(campaign).data, "progress": services.progress(campaign, request.user)})


class CampaignCloseApi(APIView):
    @extend_schema(request=None, responses=CampaignSerializer)
    def post(self, request: Request, campaign_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "campaign.manage", request.auth)
        campaign = services.campaign_close(user=request.user, campaign=campaign, token=request.auth,
                                           ip_address=client_ip(request))
        return Response(CampaignSerializer(campaign).data)


class SuggestionsStopApi(APIView):
    @extend_schema(request=None, responses=CampaignSerializer)
    def post(self, request: Request, campaign_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "campaign.manage", request.auth)
        campaign = services.suggestions_stop(user=request.user, campaign=campaign, token=request.auth,
                                             ip_address=client_ip(request))
        return Response(CampaignSerializer(campaign).data)


# --- annotating ---------------------------------------------------------------------------------

class NextItemApi(APIView):
    """The next item for me, leased to me; 204 when I have done everything I can."""

    @extend_schema(request=None, responses={200: dict, 204: None})
    def post(self, request: Request, campaign_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.submit", request.auth)
        item = services.next_item(user=request.user, campaign=campaign)
        if item is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        item.campaign = campaign
        return Response({**selectors.item_payload(item, request.user, fresh=True),
                         "progress": services.my_progress(campaign, request.user)})


class ItemApi(APIView):
    """One item with my draft and my annotation (to go back and fix it)."""

    @extend_schema(responses=dict)
    def get(self, request: Request, campaign_id: int, item_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.submit", request.auth)
        item = services.get_item(campaign, item_id)
        return Response(selectors.item_payload(item, request.user))


class SubmitApi(APIView):
    @extend_schema(request=SubmitSerializer, responses={201: dict, 200: dict})
    def post(self, request: Request, campaign_id: int, item_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.submit", request.auth)
        item = services.get_item(campaign, item_id)
        data = _valid(SubmitSerializer, request)
        annotation, created = services.submit(user=request.user, campaign=campaign, item=item, **data)
        return Response({"annotation": services.annotation_payload(annotation),
                         "progress": services.my_progress(campaign, request.user)},
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class SkipApi(APIView):
    @extend_schema(request=SkipSerializer, responses={201: dict, 200: dict})
    def post(self, request: Request, campaign_id: int, item_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.submit", request.auth)
        item = services.get_item(campaign, item_id)
        data = _valid(SkipSerializer, request)
        annotation, created = services.submit(user=request.user, campaign=campaign, item=item,
                                              client_id=data["client_id"], skipped=True)
        return Response({"annotation": services.annotation_payload(annotation)},
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class DraftApi(APIView):
    @extend_schema(request=DraftSerializer, responses=dict)
    def put(self, request: Request, campaign_id: int, item_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.submit", request.auth)
        item = services.get_item(campaign, item_id)
        data = _valid(DraftSerializer, request)
        draft = services.draft_save(user=request.user, campaign=campaign, item=item, **data)
        return Response({"values": draft.values, "comment": draft.comment, "updated_at": draft.updated_at})


class MyAnnotationsApi(ListAPIView):
    """My annotations in this campaign, newest first."""

    serializer_class = AnnotationPayloadSerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        campaign = services.get_campaign(self.request.user, self.kwargs["campaign_id"], "annotation.submit",
                                         self.request.auth)
        return selectors.my_annotations(campaign, self.request.user)

    def get(self, request: Request, *args, **kwargs) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([services.annotation_payload(a) for a in page])


class AnnotationApi(APIView):
    """My own annotation: read it, or edit it with the revision I loaded (409 when stale)."""

    @extend_schema(responses=dict)
    def get(self, request: Request, annotation_id: int) -> Response:
        return Response(services.annotation_payload(_annotation(request, annotation_id)))

    @extend_schema(request=EditSerializer, responses=dict)
    def patch(self, request: Request, annotation_id: int) -> Response:
        annotation = _annotation(request, annotation_id)
        data = _valid(EditSerializer, request)
        annotation = services.edit(user=request.user, annotation=annotation, **data)
        return Response(services.annotation_payload(annotation))


def _fetch_annotation(annotation_id) -> Annotation:
    try:
        return (Annotation.objects.select_related("item__campaign__project", "item__row", "schema", "annotator")
                .get(pk=int(annotation_id)))
    except (Annotation.DoesNotExist, ValueError, OverflowError):
        raise NotFound() from None


def _annotation(request: Request, annotation_id) -> Annotation:
    annotation = _fetch_annotation(annotation_id)
    campaign = annotation.item.campaign
    if annotation.annotator_id == request.user.pk:
        services.get_campaign(request.user, campaign.pk, "annotation.submit", request.auth)
    else:  # others' annotations: reviewers only
        policy.require(request.user, "annotation.review", campaign, request.auth)
        if request.method != "GET":
            raise NotFound()
    return annotation


# --- review, gold, quality ----------------------------------------------------------------------

DISAGREEMENTS = OpenApiParameter("disagreements", bool, description="only examples whose annotators disagree")


class ReviewQueuePagination(KeysetPagination):
    key = ("position",)
    after_param = "after"  # the position to continue after, as the API took it before cursors
    after_field_in_response = "next_after"
    default_limit = 20  # each item carries all its answers


class ReviewQueueApi(ListAPIView):
    """The campaign's answered items in order, each with its answers."""

    serializer_class = ReviewItemSerializer
    pagination_class = ReviewQueuePagination

    @extend_schema(parameters=[DISAGREEMENTS])
    def get(self, request: Request, *args, **kwargs) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([selectors.review_payload(item) for item in page])

    def get_queryset(self):
        campaign = services.get_campaign(self.request.user, self.kwargs["campaign_id"], "annotation.review",
                                         self.request.auth)
        return selectors.reviewable_items(
            campaign, disagreements=self.request.query_params.get("disagreements") in ("1", "true"))


class ReviewApi(APIView):
    @extend_schema(request=ReviewSerializer, responses=dict)
    def post(self, request: Request, annotation_id: int) -> Response:
        annotation = _reviewable(request, annotation_id)
        data = _valid(ReviewSerializer, request)
        annotation = services.review(user=request.user, annotation=annotation, token=request.auth, **data)
        return Response(services.annotation_payload(annotation))


def _reviewable(request: Request, annotation_id) -> Annotation:
    annotation = _fetch_annotation(annotation_id)
    policy.require(request.user, "annotation.review", annotation.item.campaign, request.auth)
    return annotation


class AdjudicateApi(APIView):
    @extend_schema(request=ValuesSerializer, responses=dict)
    def post(self, request: Request, campaign_id: int, item_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.review", request.auth)
        item = services.get_item(campaign, item_id)
        data = _valid(ValuesSerializer, request)
        item = services.adjudicate(user=request.user, item=item, values=data["values"], token=request.auth)
        return Response(selectors.review_payload(item))


class GoldApi(APIView):
    """Mark an item gold with its known answer (values null unmarks it)."""

    @extend_schema(request=ValuesSerializer, responses=dict)
    def put(self, request: Request, campaign_id: int, item_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "campaign.manage", request.auth)
        item = services.get_item(campaign, item_id)
        data = _valid(ValuesSerializer, request)
        item = services.set_gold(user=request.user, item=item, values=data["values"], token=request.auth)
        return Response(selectors.review_payload(item))


class QualityApi(APIView):
    @extend_schema(responses=dict)
    def get(self, request: Request, campaign_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "annotation.review", request.auth)
        return Response({**quality.campaign_quality(campaign), "progress": services.progress(campaign)})


# --- exports ------------------------------------------------------------------------------------

class CampaignExportsApi(ListAPIView):
    """The campaign's exports, newest first."""

    serializer_class = AnnotationExportSerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        campaign = services.get_campaign(self.request.user, self.kwargs["campaign_id"], "campaign.manage",
                                         self.request.auth)
        return campaign.exports.select_related("version")

    @extend_schema(request=ExportStartSerializer, responses={202: AnnotationExportSerializer})
    def post(self, request: Request, campaign_id: int) -> Response:
        campaign = services.get_campaign(request.user, campaign_id, "campaign.manage", request.auth)
        data = _valid(ExportStartSerializer, request)
        export = services.export_start(user=request.user, campaign=campaign, kind=data["kind"], mode=data["mode"],
                                       min_agreement=data["min_agreement"], dataset_id=data["dataset"],
                                       new_dataset_name=data["new_dataset_name"], message=data["message"],
                                       token=request.auth, ip_address=client_ip(request))
        return Response(AnnotationExportSerializer(export).data, status=status.HTTP_202_ACCEPTED)


class ExportDetailApi(APIView):
    @extend_schema(responses=AnnotationExportSerializer)
    def get(self, request: Request, export_id: int) -> Response:
        try:
            export = AnnotationExport.objects.select_related("campaign__project", "version").get(pk=int(export_id))
        except (AnnotationExport.DoesNotExist, ValueError, OverflowError):
            raise NotFound() from None
        policy.require(request.user, "campaign.manage", export.campaign, request.auth)
        return Response(AnnotationExportSerializer(export).data)


class RawExportApi(APIView):
    """Every annotation with its annotator and times, streamed (JSONL, or CSV safe for spreadsheets)."""

    @extend_schema(parameters=[OpenApiParameter("export_format", str, enum=list(STREAM_FORMATS))],
                   responses={(200, "application/x-ndjson"): bytes})
    def get(self, request: Request, campaign_id: int) -> StreamingHttpResponse:
        campaign = services.get_campaign(request.user, campaign_id, "campaign.manage", request.auth)
        export_format = request.query_params.get("export_format", "jsonl")
        if export_format not in STREAM_FORMATS:
            raise Invalid(f"export_format is {names_in_words(STREAM_FORMATS, 'or')}", field="export_format")
        return exports.raw_export_response(campaign, export_format)
