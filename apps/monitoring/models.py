from django.conf import settings
from django.db import models


class Alert(models.Model):
    """One condition an operator should look at, from first seen until it stopped holding.

    Rules are evaluated again and again (the monitoring page, a periodic task); while a rule
    keeps firing for a subject its one open alert is refreshed, not duplicated. A site admin
    acknowledges an alert (someone is on it: it stays open) or resolves it by hand.
    """

    class Rule(models.TextChoices):
        JOB_FAILED = "job_failed", "Job failed"
        WORKER_LOST = "worker_lost", "Worker lost"
        QUEUE_WAIT = "queue_wait", "Queue wait"
        HTTP_ERROR_RATE = "http_error_rate", "HTTP error rate"
        CANARY_ROLLED_BACK = "canary_rolled_back", "Canary rolled back"

    rule = models.CharField(max_length=32, choices=Rule.choices)
    subject = models.CharField(max_length=200)  # what it is about: "training-job:12", "queue:gpu", "http"
    message = models.TextField()  # the latest evaluation's wording
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    notified_at = models.DateTimeField(null=True, blank=True)  # when the webhook took it
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    # Set when a person resolved it; None when the rule stopped firing by itself.
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")

    class Meta:
        ordering = ["-first_seen", "-id"]
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["rule", "subject"], condition=models.Q(resolved_at__isnull=True),
                                               name="one_open_alert_per_rule_and_subject")]
        indexes = [models.Index(fields=["resolved_at", "first_seen"])]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject}"
