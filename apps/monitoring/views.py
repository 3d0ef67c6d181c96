from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from prometheus_client import CONTENT_TYPE_LATEST

from apps.core.errors import Conflict
from apps.core.http import client_ip
from apps.monitoring import access, broker, selectors, services
from apps.monitoring.exposition import exposition


@never_cache
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """The dashboard for site staff: live tiles and charts (static/js/monitoring.js keeps them
    current over ws/monitoring/), alerts, workers, failures and web traffic. Rules are evaluated
    on every view, so what it shows is current even between periodic runs."""
    access.require_site_staff(request.user)
    evaluation = services.alerts_evaluate()
    inspection = broker.inspect_workers()
    depths = services.queue_depths_record()
    request.nav_section = "monitoring"
    return render(request, "monitoring/overview.html", {
        "snapshot": selectors.dashboard_snapshot(inspection=inspection, depths=depths),
        "workers": selectors.workers_overview(inspection),
        "queues": depths,
        "failures": selectors.recent_failures(),
        "http": selectors.http_summary(),
        "http_window_min": selectors.HTTP_WINDOW_MIN,
        "history_min": selectors.HISTORY_MIN,
        "open_alerts": selectors.open_alerts().select_related("acknowledged_by"),
        "resolved_alerts": selectors.recently_resolved_alerts(),
        "rules_unavailable": evaluation.unavailable,
        "webhook_configured": bool(settings.ALERT_WEBHOOK_URL),
    })


@require_POST
def alert_acknowledge(request: HttpRequest, alert_id: int) -> HttpResponse:
    return _act(request, alert_id, services.alert_acknowledge, "Alert acknowledged.")


@require_POST
def alert_resolve(request: HttpRequest, alert_id: int) -> HttpResponse:
    return _act(request, alert_id, services.alert_resolve, "Alert resolved.")


def _act(request: HttpRequest, alert_id: int, service, done: str) -> HttpResponse:
    alert = access.get_alert(request.user, alert_id)
    try:
        service(by=request.user, alert=alert, ip_address=client_ip(request))
        messages.success(request, done)
    except Conflict as exc:
        messages.error(request, exc.message)
    return redirect("monitoring:overview")


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint (see access.require_metrics_reader for who may read it)."""
    access.require_metrics_reader(request)
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
