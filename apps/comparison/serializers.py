from rest_framework import serializers

from apps.comparison import selectors
from apps.comparison.models import Comparison, Pair, Vote
from apps.core.rendering import render_markdown


class ComparisonSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)
    dataset_version = serializers.IntegerField(source="dataset_version_id", read_only=True, allow_null=True)
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True, allow_null=True)
    models = serializers.SerializerMethodField()
    prompt_count = serializers.SerializerMethodField()

    class Meta:
        model = Comparison
        fields = ["id", "project", "name", "state", "cancel_requested", "cells_done", "cells_total", "error",
                  "models", "prompt_count", "params", "source", "dataset_version", "created_by", "created_at",
                  "started_at", "finished_at", "runs", "worker"]

    def get_models(self, comparison: Comparison) -> list[dict]:
        # .all() uses the list view's prefetch (one query for the page, not one per comparison)
        contestants = sorted(comparison.contestants.all(), key=lambda c: c.position)
        return [selectors.contestant_payload(c) for c in contestants]

    def get_prompt_count(self, comparison: Comparison) -> int:
        annotated = getattr(comparison, "prompt_total", None)
        return annotated if annotated is not None else comparison.prompts.count()


class ComparisonCreateSerializer(serializers.Serializer):
    """Prompts typed (`prompts`, optional `references`) or sampled from a dataset version."""

    name = serializers.CharField(max_length=120)
    models = serializers.ListField(child=serializers.JSONField(), help_text="model ids of the project, in column order")
    provider_models = serializers.ListField(
        child=serializers.JSONField(), required=False, default=None, allow_null=True,
        help_text="provider models enabled for the project (ids or “provider/model” names), columns after `models`; "
                  "2 to 4 columns in all")
    prompts = serializers.ListField(child=serializers.JSONField(allow_null=True), required=False, allow_empty=True, default=None,
                                    allow_null=True)
    references = serializers.ListField(child=serializers.JSONField(allow_null=True), required=False, default=None, allow_null=True)
    dataset_version = serializers.IntegerField(min_value=1, required=False, default=None, allow_null=True)
    split = serializers.CharField(max_length=16, required=False, allow_blank=True, default="")
    sample_size = serializers.IntegerField(required=False, default=None, allow_null=True)
    seed = serializers.IntegerField(required=False, default=0)
    params = serializers.DictField(required=False, default=dict,
                                   help_text="sampling: max_new_tokens, temperature, top_p, top_k, stop, seed")


class CellSerializer(serializers.Serializer):
    prompt = serializers.IntegerField()
    contestant = serializers.IntegerField()
    text = serializers.CharField()
    html = serializers.CharField(help_text="the text as Markdown, rendered (raw HTML in it shown as text)")
    error = serializers.CharField()
    finish_reason = serializers.CharField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    latency_s = serializers.FloatField(allow_null=True)
    tokens_per_s = serializers.FloatField(allow_null=True)
    scores = serializers.DictField()


class PromptSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    position = serializers.IntegerField()
    text = serializers.CharField()
    reference = serializers.CharField(allow_null=True)


class GridSerializer(serializers.Serializer):
    prompts = PromptSerializer(many=True)
    cells = CellSerializer(many=True)
    summaries = serializers.ListField(child=serializers.DictField())


class BlindPairSerializer(serializers.Serializer):
    """What a voter sees before voting: no model name or id, only A (left) and B (right)."""

    id = serializers.IntegerField()
    prompt = serializers.CharField()
    a = serializers.CharField(help_text="the left output")
    b = serializers.CharField(help_text="the right output")
    prompt_html = serializers.CharField(help_text="the prompt as Markdown, rendered (raw HTML shown as text)")
    a_html = serializers.CharField(help_text="the left output as Markdown, rendered")
    b_html = serializers.CharField(help_text="the right output as Markdown, rendered")


class NextPairSerializer(serializers.Serializer):
    pair = BlindPairSerializer(allow_null=True)
    voted = serializers.IntegerField(help_text="votes this person cast in this comparison")
    remaining = serializers.IntegerField(help_text="pairs this person has not been served yet")


def blind_pair(pair: Pair | None) -> dict | None:
    if pair is None:
        return None
    texts = dict(pair.comparison.outputs.filter(prompt_id=pair.prompt_id, contestant_id__in=[
        pair.first_id, pair.second_id]).values_list("contestant_id", "text"))
    a, b = texts.get(pair.left.pk, ""), texts.get(pair.right.pk, "")
    return {"id": pair.pk, "prompt": pair.prompt.text, "a": a, "b": b, "prompt_html": render_markdown(pair.prompt.text),
            "a_html": render_markdown(a), "b_html": render_markdown(b)}


class VoteCastSerializer(serializers.Serializer):
    pair = serializers.IntegerField(min_value=1)
    choice = serializers.ChoiceField(choices=Vote.Choice.values)
    client_id = serializers.CharField(max_length=64, help_text="generated by the client (a UUID); a retry resends it")


class VoteSerializer(serializers.Serializer):
    """A cast vote, with the models revealed."""

    id = serializers.IntegerField()
    pair = serializers.IntegerField()
    choice = serializers.CharField()
    client_id = serializers.CharField()
    a = serializers.DictField(help_text="the left model: id (\"provider:<id>\" for a provider model) and name")
    b = serializers.DictField(help_text="the right model: id and name")
    winner = serializers.DictField(allow_null=True)


def revealed_vote(vote: Vote) -> dict:
    pair = vote.pair

    def model(contestant):
        named = selectors.entrant(contestant)
        return {"id": named.pk, "name": named.name}

    return {"id": vote.pk, "pair": pair.pk, "choice": vote.choice, "client_id": vote.client_id,
            "a": model(pair.left), "b": model(pair.right), "winner": model(vote.winner) if vote.winner else None}


class LeaderboardSerializer(serializers.Serializer):
    total_votes = serializers.IntegerField()
    models = serializers.ListField(child=serializers.DictField())
    standings = serializers.ListField(child=serializers.DictField())
    win_matrix = serializers.ListField(child=serializers.ListField(child=serializers.FloatField(allow_null=True)))
    games = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))
    judges = serializers.ListField(child=serializers.DictField(), required=False,
                                   help_text="a comparison's board only: each judge's newest succeeded run over it, "
                                             "its verdicts counted as votes ({run, judge, name, kind, model, "
                                             "agreement, calibration, board}), apart from the people's")


class ExportSerializer(serializers.Serializer):
    dataset = serializers.IntegerField(min_value=1, required=False, default=None, allow_null=True,
                                       help_text="an existing dataset of the project")
    dataset_name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="",
                                         help_text="or the name of a new dataset")


class ExportedSerializer(serializers.Serializer):
    dataset = serializers.IntegerField()
    version = serializers.IntegerField()
    rows = serializers.IntegerField()
    content_hash = serializers.CharField()
