"""Providers: registering them (site staff), enabling them per project, and calling them.

`provider_chat` is the one way any app sends a prompt to an outside model: it checks that the
project may use the model (enablement, and the caller's `provider.use` through the policy
layer), holds the project to the provider's daily budget and the provider's rate limit, checks
the address again and pins the connection to it, and records the usage.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.core.errors import Conflict, DomainError, Invalid, NotFound, PermissionDenied, QuotaExceeded
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project
from apps.providers import crypto, netguard, selectors
from apps.providers.access import require_site_staff
from apps.providers.client import build_client
from apps.providers.models import (
    AllowedNetwork,
    ProjectProviderPolicy,
    Provider,
    ProviderCall,
    ProviderEnablement,
    ProviderModel,
    ProviderUsage,
)
from workers.pii import redact_text, scan_text

logger = logging.getLogger(__name__)

MAX_NAME = 100
MAX_MODEL_NAME = 200
MAX_MODELS = 500
MAX_KEY = 500
MAX_BUDGET = 10**12
MAX_RETRIES = 5
MAX_MESSAGES = 500
MAX_MESSAGE_CHARS = 200_000  # all messages together
MAX_PRICE = Decimal("1000000")  # per 1k tokens
MICRO = Decimal("0.000001")  # prices and costs are kept to six decimals
PRICE_FIELDS = ("input_price_per_1k", "output_price_per_1k")
ROLES = ("system", "user", "assistant")
PARAMS = {"max_tokens", "temperature", "top_p", "stop", "seed"}
# A rate-limit refusal shorter than this is waited out by a job's call (the provider's window is
# a minute); a spent daily budget is not.
MAX_QUOTA_WAIT_S = 65


class ProviderError(DomainError):
    """The provider could not be reached or refused the call: the provider's own message, key scrubbed."""

    status = 502


# --- checks ---------------------------------------------------------------------------------

def _text(value, field: str, *, max_length: int, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise Invalid(f"{field} is text.", field=field)
    value = value.strip()
    if required and not value:
        raise Invalid(f"{field} may not be empty.", field=field)
    if len(value) > max_length:
        raise Invalid(f"{field} is at most {max_length} characters.", field=field)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise Invalid(f"{field} may not contain control characters.", field=field)
    return value


def _optional_int(value, field: str, *, low: int, high: int) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{field} is a whole number or empty.", field=field)
    if not low <= value <= high:
        raise Invalid(f"{field} is between {low} and {high}.", field=field)
    return value


def _api_key(value) -> str:
    key = _text(value, "api_key", max_length=MAX_KEY, required=False)
    if any(c.isspace() for c in key):
        raise Invalid("api_key may not contain spaces.", field="api_key")
    return key


def _model_names(values) -> list[str]:
    if values is None:
        return []
    if not isinstance(values, list | tuple) or len(values) > MAX_MODELS:
        raise Invalid(f"models is a list of at most {MAX_MODELS} model names.", field="models")
    names = [_text(v, "models", max_length=MAX_MODEL_NAME) for v in values]
    return list(dict.fromkeys(names))


def _settings(values: dict) -> dict:
    """Budget, rate, timeout and retry values checked (only the ones given)."""
    checked = {}
    if "daily_token_budget" in values:
        checked["daily_token_budget"] = _optional_int(values["daily_token_budget"], "daily_token_budget",
                                                      low=1, high=MAX_BUDGET)
    if "daily_request_budget" in values:
        checked["daily_request_budget"] = _optional_int(values["daily_request_budget"], "daily_request_budget",
                                                        low=1, high=2**31 - 1)
    if "requests_per_minute" in values:
        checked["requests_per_minute"] = _optional_int(values["requests_per_minute"], "requests_per_minute",
                                                       low=1, high=1_000_000)
    if "timeout_s" in values:
        timeout = values["timeout_s"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) \
                or not 1 <= timeout <= settings.PROVIDER_MAX_TIMEOUT_S:
            raise Invalid(f"timeout_s is between 1 and {settings.PROVIDER_MAX_TIMEOUT_S:g} seconds.", field="timeout_s")
        checked["timeout_s"] = float(timeout)
    if "max_retries" in values:
        retries = values["max_retries"]
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
            raise Invalid(f"max_retries is between 0 and {MAX_RETRIES}.", field="max_retries")
        checked["max_retries"] = retries
    if "enabled" in values:
        if not isinstance(values["enabled"], bool):
            raise Invalid("enabled is true or false.", field="enabled")
        checked["enabled"] = values["enabled"]
    return checked


def _price(value, field: str) -> Decimal | None:
    """A price per 1k tokens: a number or decimal text from 0 to MAX_PRICE with at most six
    decimals; null clears it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Invalid(f"{field} is a price per 1,000 tokens: a number, or null.", field=field)
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise Invalid(f"{field} is a price per 1,000 tokens: a number, or null.", field=field) from None
    if not price.is_finite() or not 0 <= price <= MAX_PRICE:
        raise Invalid(f"{field} is between 0 and {MAX_PRICE}.", field=field)
    if price != price.quantize(MICRO, rounding=ROUND_HALF_UP):
        raise Invalid(f"{field} has at most six decimals.", field=field)
    return price


def _prices(provider: Provider, values) -> dict[str, dict[str, Decimal | None]]:
    """{model name: {input_price_per_1k, output_price_per_1k}} checked, each model one of the
    provider's, each refusal naming prices.<model>.<field>."""
    if not isinstance(values, dict):
        raise Invalid("prices is an object {model name: {input_price_per_1k, output_price_per_1k}}.", field="prices")
    known = set(provider.models.values_list("name", flat=True))
    checked = {}
    for name, given in values.items():
        if name not in known:
            raise Invalid(f"{provider.name} has no model {str(name)[:200]!r}.", field=f"prices.{str(name)[:200]}")
        if not isinstance(given, dict) or not given or set(given) - set(PRICE_FIELDS):
            raise Invalid(f"Each model's prices are {{{', '.join(PRICE_FIELDS)}}}.", field=f"prices.{name}")
        checked[name] = {field: _price(value, f"prices.{name}.{field}") for field, value in given.items()}
    return checked


def call_cost(prompt_tokens: int, completion_tokens: int, model: ProviderModel) -> Decimal | None:
    """What a call cost at the model's prices: tokens / 1000 × the price per 1k, prompt and
    completion apart, to six decimals (half up); None when the model is not priced both ways."""
    if model.input_price_per_1k is None or model.output_price_per_1k is None:
        return None
    cost = (Decimal(prompt_tokens) * model.input_price_per_1k
            + Decimal(completion_tokens) * model.output_price_per_1k) / 1000
    return cost.quantize(MICRO, rounding=ROUND_HALF_UP)


def public_fields(provider: Provider) -> dict:
    """What the audit log keeps of a provider: never the key, only whether there is one."""
    return {"name": provider.name, "base_url": provider.base_url, "enabled": provider.enabled,
            "has_api_key": bool(provider.api_key_encrypted), "daily_token_budget": provider.daily_token_budget,
            "daily_request_budget": provider.daily_request_budget, "requests_per_minute": provider.requests_per_minute,
            "timeout_s": provider.timeout_s, "max_retries": provider.max_retries}


def _set_key(provider: Provider, key: str) -> None:
    provider.api_key_encrypted = crypto.encrypt(key)
    provider.api_key_last4 = key[-4:] if len(key) >= 8 else ""  # a short key shows nothing of itself


def _set_models(provider: Provider, names: list[str]) -> None:
    provider.models.exclude(name__in=names).delete()
    existing = set(provider.models.values_list("name", flat=True))
    ProviderModel.objects.bulk_create([ProviderModel(provider=provider, name=n) for n in names if n not in existing])


# --- site staff: providers, models, enablement, allowlist -------------------------------------

def provider_create(*, user, name, base_url, api_key="", models=None, token=None, ip_address=None,
                    **values) -> Provider:
    require_site_staff(user, token)
    name = _text(name, "name", max_length=MAX_NAME)
    checked = netguard.check_base_url(base_url)
    names = _model_names(models)
    provider = Provider(name=name, base_url=checked.url, created_by=user, **_settings(values))
    _set_key(provider, _api_key(api_key))
    try:
        with transaction.atomic():
            provider.save()
            _set_models(provider, names)
    except IntegrityError:
        raise Invalid(f"A provider called {name!r} exists already.", field="name") from None
    audit_record(actor=user, action="provider.create", target=provider, ip_address=ip_address,
                 after={**public_fields(provider), "models": names})
    return provider


def provider_update(*, user, provider: Provider, token=None, ip_address=None, **values) -> Provider:
    """Change what is given; an empty or missing api_key keeps the stored one (it is never shown
    back, so a form cannot send it again), `clear_api_key` removes it."""
    require_site_staff(user, token)
    before = public_fields(provider)
    if "name" in values:
        provider.name = _text(values.pop("name"), "name", max_length=MAX_NAME)
    if "base_url" in values:
        provider.base_url = netguard.check_base_url(values.pop("base_url")).url
    key = _api_key(values.pop("api_key", None))
    if key:
        _set_key(provider, key)
    elif values.pop("clear_api_key", False) is True:
        provider.api_key_encrypted, provider.api_key_last4 = "", ""
    names = _model_names(values.pop("models")) if "models" in values else None
    prices = values.pop("prices", None)
    for field, value in _settings(values).items():
        setattr(provider, field, value)
    unknown = set(values) - {"daily_token_budget", "daily_request_budget", "requests_per_minute", "timeout_s",
                             "max_retries", "enabled", "clear_api_key"}
    if unknown:
        raise Invalid(f"Unknown field {sorted(unknown)[0]}.", field=sorted(unknown)[0])
    try:
        with transaction.atomic():
            provider.save()
            if names is not None:
                _set_models(provider, names)
            if prices is not None:  # after the models: a price may be for a model named in the same change
                prices = _prices(provider, prices)
                for name, fields in prices.items():
                    ProviderModel.objects.filter(provider=provider, name=name).update(**fields)
    except IntegrityError:
        raise Invalid(f"A provider called {provider.name!r} exists already.", field="name") from None
    after = public_fields(provider)
    if after != before or key or names is not None or prices:
        audit_record(actor=user, action="provider.update", target=provider, ip_address=ip_address,
                     before=before, after={**after, "api_key_replaced": bool(key),
                                           **({"models": names} if names is not None else {}),
                                           **({"prices": {n: {f: str(v) if v is not None else None
                                                              for f, v in p.items()} for n, p in prices.items()}}
                                              if prices else {})})
    return provider


def provider_delete(*, user, provider: Provider, token=None, ip_address=None) -> None:
    require_site_staff(user, token)
    audit_record(actor=user, action="provider.delete", target=provider, ip_address=ip_address,
                 before=public_fields(provider))
    provider.delete()


def provider_models_fetch(*, user, provider: Provider, token=None, ip_address=None) -> list[str]:
    """Ask the provider's GET /models and add the models it lists (kept apart as 'fetched')."""
    require_site_staff(user, token)
    client = _client(provider)
    try:
        listed = [m.id for m in client.models.list().data]
    except Exception as exc:
        raise _provider_error(provider, exc, client.key) from None
    finally:
        client.close()
    names = [n for n in listed if isinstance(n, str) and 0 < len(n) <= MAX_MODEL_NAME][:MAX_MODELS]
    existing = set(provider.models.values_list("name", flat=True))
    added = [n for n in names if n not in existing]
    ProviderModel.objects.bulk_create([ProviderModel(provider=provider, name=n, source=ProviderModel.Source.FETCHED)
                                       for n in added])
    if added:
        audit_record(actor=user, action="provider.models_fetched", target=provider, ip_address=ip_address,
                     after={"added": added})
    return names


def provider_enable(*, user, provider: Provider, project_id, token=None, ip_address=None) -> ProviderEnablement:
    require_site_staff(user, token)
    try:
        project = Project.objects.get(pk=int(project_id))
    except (Project.DoesNotExist, ValueError, TypeError, OverflowError):
        raise Invalid("No such project.", field="project") from None
    enablement, created = ProviderEnablement.objects.get_or_create(provider=provider, project=project,
                                                                  defaults={"enabled_by": user})
    if created:
        audit_record(actor=user, action="provider.enable", project=project, target=provider, ip_address=ip_address)
    return enablement


def provider_disable_for_project(*, user, enablement: ProviderEnablement, token=None, ip_address=None) -> None:
    require_site_staff(user, token)
    audit_record(actor=user, action="provider.disable", project=enablement.project, target=enablement.provider,
                 ip_address=ip_address)
    enablement.delete()


def allowlist_add(*, user, network, note="", token=None, ip_address=None) -> AllowedNetwork:
    require_site_staff(user, token)
    network = netguard.parse_network(network)
    note = _text(note, "note", max_length=200, required=False)
    entry, created = AllowedNetwork.objects.get_or_create(network=network, defaults={"note": note, "created_by": user})
    if created:
        audit_record(actor=user, action="provider.allowlist_add", target=entry, ip_address=ip_address,
                     after={"network": network, "note": note})
    return entry


def allowlist_remove(*, user, entry: AllowedNetwork, token=None, ip_address=None) -> None:
    require_site_staff(user, token)
    audit_record(actor=user, action="provider.allowlist_remove", target=entry, ip_address=ip_address,
                 before={"network": entry.network})
    entry.delete()


def get_provider(user, provider_id, token=None) -> Provider:
    require_site_staff(user, token)
    try:
        return Provider.objects.get(pk=int(provider_id))
    except (Provider.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound() from None


def rotate_keys() -> int:
    """Re-encrypt every stored key with the primary key of PROVIDER_KEYS; returns how many."""
    count = 0
    with transaction.atomic():
        for provider in Provider.objects.select_for_update().exclude(api_key_encrypted=""):
            provider.api_key_encrypted = crypto.rotate(provider.api_key_encrypted)
            provider.save(update_fields=["api_key_encrypted"])
            count += 1
    return count


# --- what a project lets leave ---------------------------------------------------------------

def project_provider_policy(project: Project) -> ProjectProviderPolicy:
    """The project's rules for outside providers (the defaults, unsaved, where it set none)."""
    return ProjectProviderPolicy.objects.filter(project=project).first() or ProjectProviderPolicy(project=project)


def require_outside_allowed(project: Project) -> ProjectProviderPolicy:
    """The project's rules, when they let its data go to outside providers; a Conflict naming the
    setting otherwise (checked when a job is queued, and again on every call)."""
    rules = project_provider_policy(project)
    if not rules.allow_outside_providers:
        raise Conflict("This project does not let its data go to outside providers (its setting "
                       "allow_outside_providers is off).", field="allow_outside_providers")
    return rules


def provider_policy_update(*, user, project: Project, token=None, ip_address=None, **values) -> ProjectProviderPolicy:
    policy.require(user, "project.edit", project, token)
    rules = project_provider_policy(project)
    before = {"allow_outside_providers": rules.allow_outside_providers, "redact_pii": rules.redact_pii}
    for field, value in values.items():
        if field not in before:
            raise Invalid(f"unknown setting {field!r}", field=field)
        if not isinstance(value, bool):
            raise Invalid(f"{field} must be true or false", field=field)
        setattr(rules, field, value)
    rules.updated_by = user
    rules.save()
    after = {"allow_outside_providers": rules.allow_outside_providers, "redact_pii": rules.redact_pii}
    audit_record(actor=user, action="provider.policy_update", target=project, project=project,
                 ip_address=ip_address, before=before, after=after)
    return rules


def _redacted(messages: list[dict]) -> tuple[list[dict], int]:
    """The messages with every finding of the PII detectors replaced by its placeholder, and how many."""
    count, kept = 0, []
    for message in messages:
        findings = scan_text(message["content"])
        count += len(findings)
        kept.append({**message, "content": redact_text(message["content"], findings)} if findings else message)
    return kept, count


# --- calling a provider ---------------------------------------------------------------------

@dataclass(frozen=True)
class ProviderReply:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    latency_s: float
    redactions: int = 0  # pieces of personal data replaced before the prompt left (the project's redact_pii)


def _client(provider: Provider):
    try:
        checked = netguard.check_base_url(provider.base_url)
    except Invalid as exc:
        # Allowed when saved, refused now: the name resolves elsewhere, or the allowlist changed.
        raise ProviderError(f"The provider's address is refused now: {exc.message}") from None
    try:
        key = crypto.decrypt(provider.api_key_encrypted)
    except crypto.KeyUnreadable as exc:
        raise ProviderError(str(exc)) from None
    return _ScrubbingClient(build_client(checked, api_key=key, timeout_s=provider.timeout_s,
                                         max_retries=provider.max_retries), key)


class _ScrubbingClient:
    """The client, and the key it holds so that errors can be scrubbed of it."""

    def __init__(self, client, key: str) -> None:
        self.client, self.key = client, key

    def __getattr__(self, name):
        return getattr(self.client, name)

    def close(self) -> None:
        self.client.close()


def _provider_error(provider: Provider, exc: Exception, key: str = "") -> DomainError:
    import openai

    if isinstance(exc, DomainError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if 300 <= status < 400:
            message = f"{provider.name} answered with a redirect ({status}), which is not followed."
        else:
            body = exc.body if isinstance(exc.body, dict) else {}
            detail = body.get("message") if isinstance(body.get("message"), str) else exc.message
            message = f"{provider.name} answered {status}: {detail}"
    elif isinstance(exc, openai.APITimeoutError):
        message = f"{provider.name} did not answer within {provider.timeout_s:g} s."
    elif isinstance(exc, openai.APIConnectionError):
        message = f"{provider.name} could not be reached."
    else:
        logger.warning("provider %s call failed: %s", provider.pk, type(exc).__name__)
        message = f"{provider.name} call failed ({type(exc).__name__})."
    return ProviderError(_scrub(message, key)[:1000])


def _scrub(text: str, key: str) -> str:
    return text.replace(key, "[key]") if key and len(key) >= 4 else text


def _messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages is a non-empty list of {role, content}.", field="messages")
    if len(messages) > MAX_MESSAGES:
        raise Invalid(f"At most {MAX_MESSAGES} messages.", field="messages")
    total = 0
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise Invalid(f"Each message is {{role: {'/'.join(ROLES)}, content: text}}.", field=f"messages[{i}]")
        total += len(message["content"])
        checked.append({"role": message["role"], "content": message["content"]})
    if total > MAX_MESSAGE_CHARS:
        raise Invalid(f"The messages hold at most {MAX_MESSAGE_CHARS} characters together.", field="messages")
    return checked


def _params(params: dict) -> dict:
    unknown = set(params) - PARAMS
    if unknown:
        raise Invalid(f"Unknown parameter {sorted(unknown)[0]}.", field=sorted(unknown)[0])
    checked = {k: v for k, v in params.items() if v is not None}
    number = (int, float)
    if "max_tokens" in checked and (isinstance(checked["max_tokens"], bool) or not isinstance(checked["max_tokens"], int)
                                    or not 1 <= checked["max_tokens"] <= 32768):
        raise Invalid("max_tokens is between 1 and 32768.", field="max_tokens")
    for field, high in (("temperature", 2), ("top_p", 1)):
        value = checked.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, number) or not 0 <= value <= high):
            raise Invalid(f"{field} is between 0 and {high}.", field=field)
    stop = checked.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and 0 < len(s) <= 100 for s in stops):
            raise Invalid("stop is up to 4 strings.", field="stop")
    if "seed" in checked and (isinstance(checked["seed"], bool) or not isinstance(checked["seed"], int)
                              or abs(checked["seed"]) >= 2**63):
        raise Invalid("seed is a whole number.", field="seed")
    return checked


def _seconds_to_midnight_utc() -> int:
    now = datetime.now(dt_timezone.utc)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(1, math.ceil((midnight - now).total_seconds()))


def _quota(message: str, retry_after_s: int) -> QuotaExceeded:
    exc = QuotaExceeded(message)
    exc.retry_after_s = retry_after_s
    return exc


def _take_rate_slot(provider: Provider) -> None:
    """A fixed one-minute window per provider in the shared Redis (add + incr are atomic there,
    so concurrent web processes and workers cannot both take the last slot)."""
    limit = provider.requests_per_minute
    if not limit:
        return
    now = time.time()
    window = int(now // 60)
    key = f"providers:rate:{provider.pk}:{window}"
    cache.add(key, 0, timeout=120)
    if cache.incr(key) > limit:
        raise _quota(f"{provider.name} allows {limit} requests a minute; try again shortly.",
                     max(1, math.ceil((window + 1) * 60 - now)))


def _reserve(provider: Provider, project: Project) -> None:
    """Hold the project to the provider's daily budgets and count the request, in one
    transaction with the day's row locked (no race between two callers)."""
    day = timezone.now().astimezone(dt_timezone.utc).date()
    with transaction.atomic():
        ProviderUsage.objects.get_or_create(provider=provider, project=project, day=day)
        usage = ProviderUsage.objects.select_for_update().get(provider=provider, project=project, day=day)
        if provider.daily_request_budget is not None and usage.requests >= provider.daily_request_budget:
            raise _quota(f"This project used its {provider.daily_request_budget} requests for today on "
                         f"{provider.name}.", _seconds_to_midnight_utc())
        if provider.daily_token_budget is not None and usage.total_tokens >= provider.daily_token_budget:
            raise _quota(f"This project used its {provider.daily_token_budget} tokens for today on "
                         f"{provider.name}.", _seconds_to_midnight_utc())
        _take_rate_slot(provider)
        ProviderUsage.objects.filter(pk=usage.pk).update(requests=F("requests") + 1)


def _record(provider: Provider, project: Project, *, prompt_tokens: int = 0, completion_tokens: int = 0,
            failed: bool = False) -> None:
    day = timezone.now().astimezone(dt_timezone.utc).date()
    ProviderUsage.objects.filter(provider=provider, project=project, day=day).update(
        prompt_tokens=F("prompt_tokens") + prompt_tokens, completion_tokens=F("completion_tokens") + completion_tokens,
        failed_requests=F("failed_requests") + int(failed))


def _record_call(project: Project, model: ProviderModel, user, *, prompt_tokens: int = 0, completion_tokens: int = 0,
                 failed: bool = False) -> None:
    """The call's own line: its tokens and cost at the model's prices now (a failed call: none)."""
    ProviderCall.objects.create(project=project, provider=model.provider, model=model, model_name=str(model),
                                user=user if getattr(user, "pk", None) else None, prompt_tokens=prompt_tokens,
                                completion_tokens=completion_tokens, failed=failed,
                                cost=call_cost(prompt_tokens, completion_tokens, model))


def _release_connection() -> None:
    """Give this thread's database connection back (to the pool) while the provider thinks: a
    job's calls in flight would otherwise each hold one for the whole call, and a worker whose
    pool they emptied could not run anything else, not even the /v1 generations of a provider
    that is this very product. Inside a transaction the connection is the transaction's: kept."""
    if not connection.in_atomic_block:
        connection.close()


def provider_chat(project: Project, provider_model, messages, *, user=None, token=None, **params) -> ProviderReply:
    """One chat completion from a provider model enabled for `project`.

    `user` (and `token`): the principal the call is made for, held to `provider.use` in the
    project; a job running for someone passes its launcher. Raises NotFound (the model is not
    usable here), Invalid (the messages or a parameter, named), QuotaExceeded (budget or rate
    limit, with retry_after_s) or ProviderError (the provider's answer, key scrubbed)."""
    if user is not None:
        policy.require(user, "provider.use", project, token)
    model = selectors.usable_model(project, provider_model)
    provider = model.provider
    rules = require_outside_allowed(project)
    messages = _messages(messages)
    redactions = 0
    if rules.redact_pii:
        messages, redactions = _redacted(messages)
    params = _params(params)
    client = _client(provider)
    _reserve(provider, project)
    _release_connection()
    started = time.monotonic()
    try:
        completion = client.chat.completions.create(model=model.name, messages=messages, **params)
    except Exception as exc:
        _record(provider, project, failed=True)
        _record_call(project, model, user, failed=True)
        raise _provider_error(provider, exc, client.key) from None
    finally:
        client.close()
    usage = completion.usage
    prompt_tokens = (usage.prompt_tokens or 0) if usage else 0
    completion_tokens = (usage.completion_tokens or 0) if usage else 0
    _record(provider, project, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    _record_call(project, model, user, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    choice = completion.choices[0] if completion.choices else None
    return ProviderReply(text=(choice.message.content or "") if choice else "",
                         finish_reason=(choice.finish_reason or "") if choice else "",
                         prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, model=str(model),
                         latency_s=round(time.monotonic() - started, 3), redactions=redactions)


def provider_chat_for_job(project: Project, provider_model, messages, *, launcher, **params) -> ProviderReply:
    """provider_chat for a job running for the person who launched it (judges, eval suites,
    teachers, comparison columns): a short rate-limit refusal is waited out and the call made
    again; a spent budget, or a launcher who is gone, is raised."""
    if launcher is None:  # provider_chat checks `provider.use` of whom the job is for
        raise PermissionDenied("provider.use", "The person who launched this run is gone; launch it again.")
    while True:
        try:
            return provider_chat(project, provider_model, messages, user=launcher, **params)
        except QuotaExceeded as exc:
            if exc.retry_after_s > MAX_QUOTA_WAIT_S:
                raise
            time.sleep(exc.retry_after_s)
