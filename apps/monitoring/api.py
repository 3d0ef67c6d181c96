"""The monitoring API, for site staff signed in (API tokens carry project permissions only and
are refused, see access.require_site_staff): the dashboard's snapshot, and the open and
resolved alerts with their acknowledge and resolve actions."""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import Invalid
from apps.core.http import client_ip
from apps.monitoring import access, broker, selectors, services
from apps.monitoring.models import Alert


class AlertSerializer(serializers.ModelSerializer):
    rule_display = serializers.CharField(source="get_rule_display", read_only=True)
    acknowledged_by = serializers.CharField(source="acknowledged_by.username", read_only=True, allow_null=True)
    resolved_by = serializers.CharField(source="resolved_by.username", read_only=True, allow_null=True)

    class Meta:
        model = Alert
        fields = ["id", "rule", "rule_display", "subject", "message", "first_seen", "last_seen", "acknowledged_at",
                  "acknowledged_by", "resolved_at", "resolved_by", "notified_at"]


class AlertListApi(ListAPIView):
    serializer_class = AlertSerializer

    @extend_schema(parameters=[OpenApiParameter("state", enum=["open", "resolved"], default="open")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        access.require_site_staff(self.request.user, self.request.auth)
        state = self.request.query_params.get("state", "open")
        if state == "open":
            alerts = selectors.open_alerts()
        elif state == "resolved":
            alerts = Alert.objects.filter(resolved_at__isnull=False).order_by("-resolved_at", "-pk")
        else:
            raise Invalid("state is 'open' or 'resolved'.", field="state")
        return alerts.select_related("acknowledged_by", "resolved_by")


class AlertAcknowledgeApi(APIView):
    """Someone is on it: the alert stays open, marked with who acknowledged it."""

    @extend_schema(request=None, responses=AlertSerializer)
    def post(self, request: Request, alert_id: int) -> Response:
        return _act(request, alert_id, services.alert_acknowledge)


class AlertResolveApi(APIView):
    """Close the alert by hand (a condition that still holds opens a new one)."""

    @extend_schema(request=None, responses=AlertSerializer)
    def post(self, request: Request, alert_id: int) -> Response:
        return _act(request, alert_id, services.alert_resolve)


def _act(request: Request, alert_id: int, service) -> Response:
    alert = access.get_alert(request.user, alert_id, request.auth)
    alert = service(by=request.user, alert=alert, token=request.auth, ip_address=client_ip(request))
    return Response(AlertSerializer(alert).data)


class DashboardApi(APIView):
    """What the live dashboard shows, for a client that polls instead of holding the websocket."""

    @extend_schema(responses=inline_serializer("DashboardSnapshot", {
        "at": serializers.DateTimeField(), "tiles": serializers.DictField(),
        "alerts": AlertSerializer(many=True), "history": serializers.DictField()}))
    def get(self, request: Request) -> Response:
        access.require_site_staff(request.user, request.auth)
        inspection = broker.recent_inspection(settings.MONITORING_LIVE_INTERVAL_S / 2)
        return Response(services.dashboard_refresh(inspection=inspection), headers={"Cache-Control": "no-store"})
