"""The Prometheus exposition behind /metrics: this process's request histogram (plus the
client library's process metrics), and figures read from the database and the broker at
scrape time, so they are as fresh as the scrape and need no bookkeeping in between."""

import os

import redis
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

from apps.datasets.models import ImportJob
from apps.monitoring import broker, engine_metrics, selectors
from apps.serving import selectors as serving_selectors
from apps.training.models import TrainingJob


class ScrapeTimeCollector:
    def collect(self):
        training = GaugeMetricFamily("workbench_training_jobs", "Fine-tune jobs by state.", labels=["state"])
        for state, count in selectors.job_counts(TrainingJob).items():
            training.add_metric([state], count)
        yield training

        imports = GaugeMetricFamily("workbench_import_jobs", "Dataset import jobs by state.", labels=["state"])
        for state, count in selectors.job_counts(ImportJob).items():
            imports.add_metric([state], count)
        yield imports

        # A gauge, not a counter: deleting a project deletes its jobs, and the sum goes down.
        yield GaugeMetricFamily("workbench_training_tokens_trained",
                                "Tokens trained, summed over every fine-tune job in the database.",
                                value=selectors.tokens_trained())

        alerts = GaugeMetricFamily("workbench_open_alerts", "Open monitoring alerts by rule.", labels=["rule"])
        for rule, count in selectors.open_alert_counts().items():
            alerts.add_metric([rule], count)
        yield alerts

        yield from serving_families()
        yield from inference_families()

        inspection = broker.inspect_workers()
        yield GaugeMetricFamily("workbench_broker_up", "1 when the Celery broker answered this scrape.",
                                value=int(inspection.reachable))
        if inspection.reachable:  # absent rather than a false 0 when nobody could be asked
            yield GaugeMetricFamily("workbench_celery_workers_online", "Celery workers that answered a ping.",
                                    value=len(inspection.workers))
            depths = selectors.queue_depths()
            if depths.reachable:
                waiting = GaugeMetricFamily("workbench_celery_queue_messages",
                                            "Messages waiting in a Celery queue.", labels=["queue"])
                for queue, count in depths.waiting.items():
                    waiting.add_metric([queue], count)
                yield waiting


SERVING_LABELS = ["project", "model", "version", "alias"]
SERVING_WINDOW_MIN = 5


def serving_families():
    """Per model version and alias (the alias empty when asked by version), over the last
    SERVING_WINDOW_MIN minutes of generations: gauges of a window, so a rate needs no counter."""
    lines = serving_selectors.recent_lines(minutes=SERVING_WINDOW_MIN)
    window = f"in the last {SERVING_WINDOW_MIN} min"
    families = {
        "requests": GaugeMetricFamily("workbench_serving_requests", f"Generations ended {window}.",
                                      labels=SERVING_LABELS),
        "errors": GaugeMetricFamily("workbench_serving_errors", f"Generations failed {window}.", labels=SERVING_LABELS),
        "latency_p99_s": GaugeMetricFamily("workbench_serving_latency_p99_seconds",
                                           f"99th percentile request time {window}.", labels=SERVING_LABELS),
        "ttft_p99_s": GaugeMetricFamily("workbench_serving_ttft_p99_seconds",
                                        f"99th percentile time to first token {window}.", labels=SERVING_LABELS),
        "tokens_per_s": GaugeMetricFamily("workbench_serving_tokens_per_second",
                                          f"Completion tokens per busy second {window}.", labels=SERVING_LABELS),
    }
    tokens = GaugeMetricFamily("workbench_serving_tokens", f"Tokens {window}, prompt (in) and completion (out).",
                               labels=[*SERVING_LABELS, "direction"])
    for line in lines:
        labels = [str(line["project"]), line["model"], line["version"], line["alias"]]
        for key, family in families.items():
            if line[key] is not None:
                family.add_metric(labels, line[key])
        tokens.add_metric([*labels, "in"], line["tokens_in"])
        tokens.add_metric([*labels, "out"], line["tokens_out"])
    yield from families.values()
    yield tokens
    in_flight = GaugeMetricFamily("workbench_serving_in_flight", "Generations running now, per project.",
                                  labels=["project"])
    for project, count in serving_selectors.in_flight_by_project().items():
        in_flight.add_metric([str(project)], count)
    yield in_flight


def inference_families():
    """Every live inference worker's engine figures per model and adapter (histograms of time
    to first token, inter-token time and queue wait; requests, tokens, batch occupancy, cache
    memory), as the workers published them, with their `worker` label (engine_metrics)."""
    try:
        expositions = engine_metrics.worker_expositions()
    except redis.RedisError:
        expositions = {}
    yield GaugeMetricFamily("workbench_inference_workers_reporting",
                            "Inference workers whose engine figures this scrape read.", value=len(expositions))
    yield from engine_metrics.families(expositions)


def exposition() -> bytes:
    """The text format: the request histogram (every web process's in multiprocess mode, see
    http_metrics; this process's, with the client library's process metrics, otherwise) and the
    scrape-time figures."""
    scrape = CollectorRegistry(auto_describe=False)  # describing would query everything at registration
    scrape.register(ScrapeTimeCollector())
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        return generate_latest(merged) + generate_latest(scrape)
    return generate_latest(REGISTRY) + generate_latest(scrape)
