from rest_framework import serializers

from apps.providers.models import AllowedNetwork, Provider, ProviderEnablement, ProviderModel, ProviderUsage


class ProviderModelSerializer(serializers.ModelSerializer):
    provider = serializers.CharField(source="provider.name", read_only=True)
    ref = serializers.SerializerMethodField(help_text="what provider_chat takes: provider/model")

    class Meta:
        model = ProviderModel
        fields = ["id", "provider", "name", "source", "enabled", "ref", "input_price_per_1k", "output_price_per_1k"]

    def get_ref(self, obj: ProviderModel) -> str:
        return f"{obj.provider.name}/{obj.name}"


class EnablementSerializer(serializers.ModelSerializer):
    project_name = serializers.CharField(source="project.name", read_only=True)

    class Meta:
        model = ProviderEnablement
        fields = ["id", "project", "project_name", "created_at"]


class ProviderSerializer(serializers.ModelSerializer):
    """A provider as site staff see it: the key is never sent back, only its last four characters."""

    api_key_hint = serializers.CharField(read_only=True)
    models = serializers.SerializerMethodField()
    projects = serializers.SerializerMethodField()

    class Meta:
        model = Provider
        fields = ["id", "name", "base_url", "api_key_hint", "enabled", "daily_token_budget", "daily_request_budget",
                  "requests_per_minute", "timeout_s", "max_retries", "models", "prices", "projects", "created_at",
                  "updated_at"]

    prices = serializers.SerializerMethodField(help_text="{model: {input_price_per_1k, output_price_per_1k}} "
                                                         "as decimal text, null where not priced")

    def get_models(self, obj: Provider) -> list[str]:
        return [m.name for m in obj.models.all()]

    def get_prices(self, obj: Provider) -> dict:
        def text(price):
            return str(price) if price is not None else None

        return {m.name: {"input_price_per_1k": text(m.input_price_per_1k),
                         "output_price_per_1k": text(m.output_price_per_1k)} for m in obj.models.all()}

    def get_projects(self, obj: Provider) -> list[int]:
        return [e.project_id for e in obj.enablements.all()]


class _ProviderFields(serializers.Serializer):
    api_key = serializers.CharField(max_length=500, required=False, allow_blank=True, write_only=True,
                                    trim_whitespace=True, help_text="stored encrypted; never returned")
    models = serializers.ListField(child=serializers.CharField(max_length=200), max_length=500, required=False,
                                   help_text="the model ids the provider serves")
    enabled = serializers.BooleanField(required=False)
    daily_token_budget = serializers.IntegerField(min_value=1, max_value=10**12, required=False, allow_null=True,
                                                  help_text="tokens per project per day (UTC); null: none")
    daily_request_budget = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                                    allow_null=True, help_text="requests per project per day (UTC)")
    requests_per_minute = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False, allow_null=True,
                                                   help_text="across all projects")
    timeout_s = serializers.FloatField(min_value=1, max_value=3600, required=False)
    max_retries = serializers.IntegerField(min_value=0, max_value=5, required=False)


class ProviderCreateSerializer(_ProviderFields):
    name = serializers.CharField(max_length=100)
    base_url = serializers.CharField(max_length=500, help_text="e.g. https://api.openai.com/v1")


class ProviderUpdateSerializer(_ProviderFields):
    name = serializers.CharField(max_length=100, required=False)
    base_url = serializers.CharField(max_length=500, required=False)
    clear_api_key = serializers.BooleanField(required=False, help_text="remove the stored key")
    prices = serializers.JSONField(required=False, help_text="{model name: {input_price_per_1k, "
                                                             "output_price_per_1k}}: per 1,000 tokens, at most six "
                                                             "decimals; null clears")


class EnableSerializer(serializers.Serializer):
    project = serializers.IntegerField(min_value=1, max_value=2**63 - 1)


class AllowedNetworkSerializer(serializers.ModelSerializer):
    class Meta:
        model = AllowedNetwork
        fields = ["id", "network", "note", "created_at"]
        extra_kwargs = {"network": {"validators": [], "help_text": "an address or CIDR range, e.g. 10.0.0.0/24"}}


class UsageSerializer(serializers.ModelSerializer):
    provider = serializers.CharField(source="provider.name", read_only=True)
    total_tokens = serializers.IntegerField(read_only=True)

    class Meta:
        model = ProviderUsage
        fields = ["provider", "day", "requests", "failed_requests", "prompt_tokens", "completion_tokens",
                  "total_tokens"]


class ChatSerializer(serializers.Serializer):
    provider_model = serializers.CharField(max_length=320, help_text="a provider model's id, or provider/model")
    messages = serializers.JSONField(help_text="[{role: system|user|assistant, content}]")
    max_tokens = serializers.IntegerField(required=False)
    temperature = serializers.FloatField(required=False)
    top_p = serializers.FloatField(required=False)
    stop = serializers.JSONField(required=False)
    seed = serializers.IntegerField(required=False)


class ChatReplySerializer(serializers.Serializer):
    text = serializers.CharField()
    finish_reason = serializers.CharField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    model = serializers.CharField()
    latency_s = serializers.FloatField()
    redactions = serializers.IntegerField()


class ProviderPolicySerializer(serializers.Serializer):
    allow_outside_providers = serializers.BooleanField()
    redact_pii = serializers.BooleanField()


class CostLineSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="provider/model")
    calls = serializers.IntegerField()
    failed_calls = serializers.IntegerField()
    unpriced_calls = serializers.IntegerField(help_text="calls made while the model had no price: no cost")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cost = serializers.CharField(help_text="decimal text, six decimals")


class CostsSerializer(serializers.Serializer):
    totals = CostLineSerializer()
    by_model = CostLineSerializer(many=True)
