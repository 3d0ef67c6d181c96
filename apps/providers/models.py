"""Outside OpenAI-compatible model providers, registered by site staff and enabled per project.

The API key is stored only encrypted (apps/providers/crypto.py); its last four characters are
kept apart so people can tell keys apart without the key ever being shown again.
"""

from django.conf import settings
from django.db import models


class AllowedNetwork(models.Model):
    """An address range site staff allow providers to live in although it is not public
    (loopback, private, link-local, reserved): e.g. 10.1.2.3/32 for a vLLM server on the LAN."""

    network = models.CharField(max_length=64, unique=True)  # CIDR, normalised (ipaddress.ip_network)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["network"]

    def __str__(self) -> str:
        return self.network


class Provider(models.Model):
    name = models.CharField(max_length=100, unique=True)
    base_url = models.CharField(max_length=500)  # checked by apps.providers.netguard on save and on every call
    api_key_encrypted = models.TextField(blank=True)  # a MultiFernet token; "" when the server needs no key
    api_key_last4 = models.CharField(max_length=4, blank=True)
    enabled = models.BooleanField(default=True)  # a disabled provider answers no call, in any project
    # Per project and day (UTC); None: no budget of that kind.
    daily_token_budget = models.PositiveBigIntegerField(null=True, blank=True)
    daily_request_budget = models.PositiveIntegerField(null=True, blank=True)
    # Across every project: what the provider's own limits allow. None: no limit.
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    timeout_s = models.FloatField(default=60.0)
    max_retries = models.PositiveSmallIntegerField(default=2)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def api_key_hint(self) -> str:
        return f"…{self.api_key_last4}" if self.api_key_encrypted else ""


class ProviderModel(models.Model):
    """A model a provider serves, by the id the provider knows it by."""

    class Source(models.TextChoices):
        ADMIN = "admin"  # typed by site staff
        FETCHED = "fetched"  # listed by the provider's GET /models

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.ADMIN)
    enabled = models.BooleanField(default=True)
    # What the provider charges, per 1,000 tokens sent (prompt) and received (completion), in the
    # site's currency; set by site staff. Null: not priced, its calls record tokens but no cost.
    input_price_per_1k = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    output_price_per_1k = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider__name", "name"]
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="provider_model_unique_name")]

    def __str__(self) -> str:
        return f"{self.provider.name}/{self.name}"


class ProviderEnablement(models.Model):
    """The provider may be used by this project's members (who hold `provider.use`)."""

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="enablements")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="provider_enablements")
    enabled_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "project"], name="provider_enablement_unique")]


class ProviderUsage(models.Model):
    """Calls and tokens of one project on one provider on one day (UTC): what budgets are held to."""

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="usage")
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="provider_usage")
    day = models.DateField()
    requests = models.PositiveIntegerField(default=0)
    failed_requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "provider_id"]
        constraints = [models.UniqueConstraint(fields=["provider", "project", "day"], name="provider_usage_unique_day")]

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ProviderCall(models.Model):
    """One call of a project to a provider model: its tokens and what it cost at the model's
    prices then (null when the model had no price). Failed calls are kept, with no tokens."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="provider_calls")
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="calls")
    model = models.ForeignKey(ProviderModel, null=True, on_delete=models.SET_NULL, related_name="calls")
    model_name = models.CharField(max_length=320)  # provider/model, kept when the model is removed
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    failed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "created_at"])]


class ProjectProviderPolicy(models.Model):
    """What a project lets leave for outside providers; its admins (project.edit) decide. Without a
    row: allowed, not redacted."""

    project = models.OneToOneField("projects.Project", on_delete=models.CASCADE, related_name="provider_policy")
    # Off: no prompt of this project goes to any provider (judges, teachers, the playground included).
    allow_outside_providers = models.BooleanField(default=True)
    # On: e-mails, phone numbers, cards, IBANs, addresses and secrets in every message are replaced by
    # placeholders ("[EMAIL]") before it leaves (workers.pii, the detectors of the PII reports).
    redact_pii = models.BooleanField(default=False)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)
