from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from apps.monitoring import access, selectors, services
from apps.monitoring.exposition import exposition


@never_cache
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """Workers, queues, running and failed jobs, web traffic and alerts, for site staff.
    Rules are evaluated on every view, so what it shows is current even between periodic runs."""
    access.require_site_staff(request.user)
    evaluation = services.alerts_evaluate()
    request.nav_section = "monitoring"
    return render(request, "monitoring/overview.html", {
        "workers": selectors.workers_overview(),
        "queues": selectors.queue_depths(),
        "failures": selectors.recent_failures(),
        "http": selectors.http_summary(),
        "http_window_min": selectors.HTTP_WINDOW_MIN,
        "open_alerts": selectors.open_alerts(),
        "resolved_alerts": selectors.recently_resolved_alerts(),
        "rules_unavailable": evaluation.unavailable,
        "webhook_configured": bool(settings.ALERT_WEBHOOK_URL),
    })


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint (see access.require_metrics_reader for who may read it)."""
    access.require_metrics_reader(request)
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
