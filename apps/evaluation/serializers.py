from rest_framework import serializers

from apps.core.rendering import render_markdown
from apps.evaluation.models import EvalItem, EvalRun, EvalSuite, Judge, JudgeRun, Preference, Rating, TeacherRun


class JudgeSerializer(serializers.ModelSerializer):
    kind = serializers.CharField(read_only=True)
    model = serializers.CharField(source="model_label", read_only=True)

    class Meta:
        model = Judge
        fields = ["id", "name", "kind", "rubric", "local_model", "provider_model", "model", "max_tokens", "created_at"]


class JudgeCreateSerializer(serializers.Serializer):
    """The rubric is checked by the service (workers.judging.check_rubric), each refusal naming its field."""

    name = serializers.CharField(max_length=120)
    rubric = serializers.JSONField(help_text="{kind: pointwise|pairwise, instructions, "
                                             "criteria: [{name, description, scale: 1-5|pass_fail}]}")
    local_model = serializers.IntegerField(required=False, allow_null=True, help_text="a ready model of the project")
    provider_model = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=320,
                                           help_text="a provider model enabled for the project: id or provider/model")
    max_tokens = serializers.IntegerField(required=False, default=256)


class JudgeSourceSerializer(serializers.Serializer):
    """What a run judges: exactly one of a comparison, or a dataset version with the columns read
    (types only: the service checks the values, each refusal naming its field)."""

    comparison = serializers.IntegerField(required=False, allow_null=True, default=None,
                                          help_text="a finished comparison of the project: its outputs")
    version = serializers.IntegerField(required=False, allow_null=True, default=None,
                                       help_text="a ready dataset version of the project: its rows")
    prompt_column = serializers.CharField(required=False, default="prompt", max_length=200,
                                          help_text="with version: the column of the prompts")
    response_column = serializers.CharField(required=False, default="response", max_length=200,
                                            help_text="with version: the column of the responses judged "
                                                      "(pairwise: response A of each pair, column 0)")
    second_response_column = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None,
                                                   max_length=200,
                                                   help_text="with version, for a pairwise judge: the column "
                                                             "compared with response_column (column 1)")


class EstimateSerializer(serializers.Serializer):
    model = serializers.CharField()
    kind = serializers.CharField()
    calls = serializers.IntegerField()
    items = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField(help_text="estimated: the messages' characters / 4")
    max_completion_tokens = serializers.IntegerField()
    max_total_tokens = serializers.IntegerField()


class JudgeRunSerializer(serializers.ModelSerializer):
    judge_name = serializers.CharField(source="judge.name", read_only=True)
    comparison_name = serializers.CharField(source="comparison.name", read_only=True, allow_null=True)
    source = serializers.CharField(source="source_label", read_only=True,
                                   help_text="what it judged: the comparison, or the version and its columns")
    columns = serializers.SerializerMethodField(help_text="a run over a version: prompt_column, response_column "
                                                          "and second_response_column (pairwise); else null")

    class Meta:
        model = JudgeRun
        fields = ["id", "judge", "judge_name", "comparison", "comparison_name", "dataset_version", "columns",
                  "source", "state", "calls_done", "calls_total",
                  "estimate", "summary", "error", "cancel_requested", "created_at", "started_at", "finished_at"]


    def get_columns(self, obj: JudgeRun) -> dict | None:
        if obj.dataset_version_id is None:
            return None
        return {k: obj.config.get(k) for k in ("prompt_column", "response_column", "second_response_column")}


class JudgeRunDetailSerializer(JudgeRunSerializer):
    agreement = serializers.SerializerMethodField(help_text="kappa, agreement and confusion with the blind votes, "
                                                            "beside the voters' own; `ratings` (pointwise): per "
                                                            "criterion the judge against people's ratings and the "
                                                            "raters against each other; and `calibration` against "
                                                            "the project's thresholds (null until it succeeds)")

    class Meta(JudgeRunSerializer.Meta):
        fields = [*JudgeRunSerializer.Meta.fields, "agreement"]

    def get_agreement(self, obj: JudgeRun) -> dict | None:
        from apps.evaluation.selectors import agreement

        return agreement(obj)


class CalibrationPolicySerializer(serializers.Serializer):
    min_kappa = serializers.FloatField(help_text="the least Cohen's kappa with the blind votes (and with people's "
                                                 "pass/fail ratings), -1 to 1")
    min_correlation = serializers.FloatField(help_text="the least Spearman's rho with people's 1-5 ratings, -1 to 1")
    min_items = serializers.IntegerField(help_text="the fewest judge-vs-person items to judge by")


class EvalSuiteSerializer(serializers.ModelSerializer):
    dataset = serializers.IntegerField(source="dataset_version.dataset_id", read_only=True)
    version_number = serializers.IntegerField(source="dataset_version.number", read_only=True)

    class Meta:
        model = EvalSuite
        fields = ["id", "name", "dataset", "dataset_version", "version_number", "split", "metrics", "baseline_model",
                  "max_new_tokens", "gate_alias", "auto_run", "created_at"]


class EvalSuiteCreateSerializer(serializers.Serializer):
    """Types only: the service checks the values, each refusal naming its field."""

    name = serializers.CharField(max_length=120)
    dataset_version = serializers.IntegerField()
    split = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")
    metrics = serializers.JSONField(help_text="[{metric: exact_match|rouge_l|perplexity, threshold: number|null}]")
    baseline_model = serializers.IntegerField(required=False, allow_null=True, default=None)
    max_new_tokens = serializers.IntegerField(required=False, default=64)
    gate_alias = serializers.CharField(required=False, allow_blank=True, max_length=48, default="")
    auto_run = serializers.BooleanField(required=False, default=False)


class ModelChoiceSerializer(serializers.Serializer):
    model = serializers.IntegerField(help_text="a ready model of the project")


class EvalRunSerializer(serializers.ModelSerializer):
    suite_name = serializers.CharField(source="suite.name", read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)

    class Meta:
        model = EvalRun
        fields = ["id", "suite", "suite_name", "model", "model_name", "training_job", "state", "items_done",
                  "items_total", "aggregates", "baseline_aggregates", "delta", "passed", "failures", "error",
                  "cancel_requested", "created_at", "started_at", "finished_at"]


class EvalItemSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvalItem
        fields = ["position", "baseline", "prompt", "reference", "output", "error", "scores"]


class EvalRunDetailSerializer(EvalRunSerializer):
    items = EvalItemSerializer(many=True, read_only=True)

    class Meta(EvalRunSerializer.Meta):
        fields = [*EvalRunSerializer.Meta.fields, "items"]


class TeacherRunRequestSerializer(serializers.Serializer):
    """Types only: the service checks ranges and references, each refusal naming its field."""

    version = serializers.JSONField(allow_null=True, help_text="the id of a ready dataset version of the project")
    prompt_column = serializers.JSONField(required=False, allow_null=True, default=None,
                                          help_text="prompt, messages (without the last assistant turn) or a "
                                                    "metadata key; default: messages, else prompt")
    local_model = serializers.JSONField(required=False, allow_null=True, default=None, help_text="a ready model of the project")
    provider_model = serializers.JSONField(required=False, allow_null=True, default=None,
                                           help_text="a provider model enabled for the project: id or provider/model")
    max_tokens = serializers.JSONField(required=False, allow_null=True, default=256, help_text="16 to 4096")
    temperature = serializers.JSONField(required=False, allow_null=True, default=0.0, help_text="0 to 2")
    seed = serializers.JSONField(required=False, allow_null=True, default=None, help_text="0 to 2^31-1, or null")


class TeacherEstimateSerializer(serializers.Serializer):
    teacher = serializers.CharField()
    rows = serializers.IntegerField()
    calls = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField(help_text="estimated: the messages' characters / 4")
    max_completion_tokens = serializers.IntegerField()
    max_total_tokens = serializers.IntegerField()
    max_cost = serializers.CharField(allow_null=True, help_text="a priced provider: the most the run can cost")


class TeacherRunSerializer(serializers.ModelSerializer):
    dataset = serializers.IntegerField(source="source_version.dataset_id", read_only=True)
    source_version_number = serializers.IntegerField(source="source_version.number", read_only=True)
    version_number = serializers.IntegerField(source="version.number", read_only=True, allow_null=True,
                                              default=None)

    class Meta:
        model = TeacherRun
        fields = ["id", "dataset", "source_version", "source_version_number", "config", "estimate", "state",
                  "rows_done", "rows_total", "prompt_tokens", "completion_tokens", "cost", "import_job", "version",
                  "version_number", "error", "cancel_requested", "created_at", "started_at", "finished_at"]


class RatingSubmitSerializer(serializers.Serializer):
    """Types only: the service checks the answer against the judge's rubric, naming the place."""

    output = serializers.IntegerField(min_value=1, help_text="an output served by ratings/next/")
    answer = serializers.JSONField(help_text="{criterion: {score: 1-5 | pass | fail, reason: text}} for every "
                                             "criterion of the judge's rubric, as the judge answers")


class RowRatingColumnsSerializer(serializers.Serializer):
    """Types only: the service checks the columns against the version, as a judge run's."""

    prompt_column = serializers.CharField(default="prompt", max_length=200,
                                          help_text="the column a run of the judge read the prompt in")
    response_column = serializers.CharField(default="response", max_length=200,
                                            help_text="the column a run of the judge read the response in")


class RowRatingSubmitSerializer(RowRatingColumnsSerializer):
    position = serializers.IntegerField(min_value=0, max_value=2**31 - 1,
                                        help_text="the row's position, as served by ratings/next/")
    answer = serializers.JSONField(help_text="{criterion: {score: 1-5 | pass | fail, reason: text}} for every "
                                             "criterion of the judge's rubric, as the judge answers")


class RowPreferenceColumnsSerializer(RowRatingColumnsSerializer):
    second_response_column = serializers.CharField(max_length=200, help_text="the column a pairwise run of the "
                                                                             "judge read the second response in")


class RowPreferenceSubmitSerializer(RowPreferenceColumnsSerializer):
    position = serializers.IntegerField(min_value=0, max_value=2**31 - 1,
                                        help_text="the row's position, as served by preferences/next/")
    choice = serializers.ChoiceField(choices=["a", "b", "tie"], help_text="the response shown as A or B is "
                                                                          "better, or neither (tie)")

    def validate(self, attrs: dict) -> dict:
        unknown = sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        if unknown:
            raise serializers.ValidationError({unknown[0][:80]: "not a field of a preference"})
        return attrs


class RatingSerializer(serializers.ModelSerializer):
    class Meta:
        model = Rating
        fields = ["id", "judge", "output", "dataset_version", "position", "prompt_column", "response_column",
                  "answer", "created_at", "updated_at"]


class PreferenceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Preference
        fields = ["id", "judge", "dataset_version", "position", "prompt_column", "response_column",
                  "second_response_column", "choice", "swapped", "created_at", "updated_at"]


class NextOutputSerializer(serializers.Serializer):
    output = serializers.DictField(allow_null=True, help_text="id, prompt, text and their Markdown as HTML (raw "
                                                              "HTML shown as text); no model: rating is blind")
    criteria = serializers.ListField(child=serializers.DictField(), help_text="the rubric's {name, description, "
                                                                              "scale}")
    rated = serializers.IntegerField(help_text="outputs you rated for this judge on this comparison")
    remaining = serializers.IntegerField()


class NextRowSerializer(serializers.Serializer):
    row = serializers.DictField(allow_null=True, help_text="position, prompt, text and their Markdown as HTML "
                                                           "(raw HTML shown as text); nothing else of the row")
    criteria = serializers.ListField(child=serializers.DictField(), help_text="the rubric's {name, description, "
                                                                              "scale}")
    rated = serializers.IntegerField(help_text="rows you rated for this judge on this version, in these columns")
    remaining = serializers.IntegerField()


def blind_row(row: dict | None) -> dict | None:
    """A version's row to rate: its prompt and response, as text and as HTML."""
    if row is None:
        return None
    return {"position": row["position"], "prompt": row["prompt"], "text": row["response"],
            "prompt_html": render_markdown(row["prompt"]), "text_html": render_markdown(row["response"])}


class NextRowPairSerializer(serializers.Serializer):
    row = serializers.DictField(allow_null=True, help_text="position, prompt, a and b (the two responses in an "
                                                           "order random to you) and their Markdown as HTML (raw "
                                                           "HTML shown as text); never which column each is")
    chosen = serializers.IntegerField(help_text="rows you chose on for this judge on this version, in these columns")
    remaining = serializers.IntegerField()


def blind_pair(row: dict | None) -> dict | None:
    """A version's row to choose on: its prompt and its two responses as A and B, as text and as HTML."""
    if row is None:
        return None
    return {"position": row["position"], "prompt": row["prompt"], "a": row["a"], "b": row["b"],
            "prompt_html": render_markdown(row["prompt"]), "a_html": render_markdown(row["a"]),
            "b_html": render_markdown(row["b"])}


def blind_output(output) -> dict | None:
    """An output to rate without its model: the prompt and the text, as text and as HTML."""
    if output is None:
        return None
    return {"id": output.pk, "prompt": output.prompt.text, "text": output.text,
            "prompt_html": render_markdown(output.prompt.text), "text_html": render_markdown(output.text)}
