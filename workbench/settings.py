"""Workbench settings: one page, everything from the environment.

Two ways to run the same code:
- embedded default (WORKBENCH_ENV unset or "embedded"): SQLite, an embedded Redis on a unix
  socket in the data folder, local files, a secret key generated once and kept there;
- production (WORKBENCH_ENV=production): DATABASE_URL, REDIS_URL, SECRET_KEY and
  ALLOWED_HOSTS are required, and HTTPS cookies, HSTS and secure headers are on.
"""

import os
import re
import secrets
import socket
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from workbench import embedded
from workbench.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

WORKBENCH_ENV = env_str("WORKBENCH_ENV", "embedded")
if WORKBENCH_ENV not in {"embedded", "production"}:
    raise ImproperlyConfigured(f"WORKBENCH_ENV must be 'embedded' or 'production', got {WORKBENCH_ENV!r}")
PRODUCTION = WORKBENCH_ENV == "production"

# Local data folder: SQLite database, embedded Redis, media, artifacts, generated secret.
DATA_DIR = Path(env_str("WORKBENCH_DATA_DIR", str(BASE_DIR / "var"))).resolve()
embedded.ensure_private_dir(DATA_DIR)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key is None:
        if PRODUCTION:
            raise ImproperlyConfigured("SECRET_KEY must be set in production")
        key_file = DATA_DIR / "secret_key"
        if not key_file.exists():
            # Written once with O_EXCL so two processes starting together agree on one key.
            try:
                fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_urlsafe(64))
        key = key_file.read_text().strip()
    if len(key) < 50 or len(set(key)) < 5 or key.startswith("django-insecure"):
        raise ImproperlyConfigured(
            "SECRET_KEY is too weak: use at least 50 random characters "
            "(python -c 'import secrets; print(secrets.token_urlsafe(64))')"
        )
    return key



SECRET_KEY = _secret_key()

DEBUG = env_bool("DEBUG", False)
if DEBUG and PRODUCTION:
    raise ImproperlyConfigured("DEBUG must not be on in production")

if PRODUCTION:
    ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
    if not ALLOWED_HOSTS or "*" in ALLOWED_HOSTS:
        raise ImproperlyConfigured("ALLOWED_HOSTS must list the served host names (no '*') in production")
else:
    ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", *env_list("ALLOWED_HOSTS", [])]
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "guardian",
    "axes",
    "channels",
    # Single sign-on (OpenID Connect) through django-allauth's social accounts: see the SSO section.
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "apps.core",
    "apps.accounts",
    "apps.projects",
    "apps.datasets",
    "apps.registry",
    "apps.training",
    "apps.serving",
    "apps.comparison",
    "apps.monitoring",
    "apps.annotation",
    "apps.providers",
    "apps.evaluation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "apps.core.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Times and counts each request by route pattern; after WhiteNoise so static files are not counted.
    "apps.monitoring.middleware.RequestMetricsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    # A single-sign-on session is checked with its provider every SSO_REVALIDATE_S.
    "apps.accounts.middleware.SsoRevalidationMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.core.middleware.DomainErrorMiddleware",
    # Last, so a locked-out login is answered before the view runs.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "workbench.urls"
ASGI_APPLICATION = "workbench.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.core.context_processors.navigation",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True)}
    if env_bool("DB_POOL", True) and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # A connection pool per process (psycopg_pool): without it every request opened a new
        # PostgreSQL connection, a server process forked for it, which was a large share of
        # an API request's cost. Celery's prefork children each make their own after the fork.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": env_int("DB_POOL_MAX_SIZE", 10), "timeout": env_float("DB_POOL_TIMEOUT_S", 10)}
elif PRODUCTION:
    raise ImproperlyConfigured("DATABASE_URL must be set in production (PostgreSQL)")
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": Path(env_str("SQLITE_PATH", str(DATA_DIR / "workbench.sqlite3"))),
            # WAL lets the web server read while a worker writes; IMMEDIATE avoids
            # "database is locked" upgrades from read to write inside a transaction.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            # A file, not :memory:, so the live test server's threads share the test database.
            "TEST": {"NAME": DATA_DIR / "test-workbench.sqlite3"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker, Channels layer, cache ----------------------------------------
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    EMBEDDED_REDIS = False
    _channels_host = REDIS_URL
    _broker_url = REDIS_URL
elif PRODUCTION:
    raise ImproperlyConfigured("REDIS_URL must be set in production")
else:
    EMBEDDED_REDIS = True
    REDIS_SOCKET = embedded.socket_path(DATA_DIR)
    REDIS_URL = f"unix://{REDIS_SOCKET}"
    _channels_host = REDIS_URL
    _broker_url = f"redis+socket://{REDIS_SOCKET}"

CHANNEL_LAYERS = {
    "default": {
        # channels_redis's layer, whose receive ends when cancelled (apps/core/channel_layer.py).
        "BACKEND": "apps.core.channel_layer.ChannelLayer",
        # A generation streams one message per token: room for a few thousand before a slow
        # reader makes the layer drop messages (the default of 100 is reached in seconds).
        # redis-py 8 reads with a 5 s socket timeout by default, the same as the layer's blocking
        # pop: a read could time out just as the server answered, killing the consumer. Longer here.
        "CONFIG": {"hosts": [{"address": _channels_host, "socket_timeout": 30}], "prefix": "workbench:ws",
                   "capacity": 5000},
    }
}
# Web server processes `manage.py up` starts (uvicorn --workers): one Python process runs on one
# core at a time (the GIL), so on PostgreSQL one per core, up to 4. The embedded SQLite default
# keeps one (its writers would only queue on the file lock).
WEB_WORKERS = env_int("WEB_WORKERS", min(os.cpu_count() or 1, 4) if DATABASE_URL else 1)

CACHES = {
    "default": {
        "BACKEND": "apps.core.cache.SharedRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "workbench",
    }
}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", _broker_url)
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_IGNORE_RESULT = True  # job rows in the database carry state and results
# A job message is acknowledged only when its task finishes, and handed to another worker
# if the one running it dies, so a killed worker never loses a job.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis redelivers an unacknowledged message after this long; training runs for hours.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 12 * 3600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Websockets one person, and one address, may hold open at once (all web processes together).
WEBSOCKETS_PER_USER = env_int("WEBSOCKETS_PER_USER", 50)
WEBSOCKETS_PER_ADDRESS = env_int("WEBSOCKETS_PER_ADDRESS", 200)

# --- Fine-tune jobs ---------------------------------------------------------------------
# A running job's worker writes a heartbeat this often; a job whose heartbeat is older than
# the stale limit has lost its worker and may be taken over (and resumed from its checkpoint)
# by another. The limit must exceed the longest pause between heartbeats (a heartbeat thread
# writes them, so a slow optimizer step does not delay it).
TRAINING_HEARTBEAT_S = env_float("TRAINING_HEARTBEAT_S", 10.0)
TRAINING_HEARTBEAT_STALE_S = env_float("TRAINING_HEARTBEAT_STALE_S", 90.0)
# A job whose worker was lost this many times fails instead of being redelivered forever
# (a job that kills its worker, by running out of memory say, must not loop).
TRAINING_MAX_RUNS = env_int("TRAINING_MAX_RUNS", 3)
TRAINING_MAX_ACTIVE_JOBS_PER_USER = env_int("TRAINING_MAX_ACTIVE_JOBS_PER_USER", 4)
TRAINING_MAX_ACTIVE_JOBS_PER_PROJECT = env_int("TRAINING_MAX_ACTIVE_JOBS_PER_PROJECT", 8)
# The most data-parallel processes (`devices`) a job may ask for: what the gpu workers can give, one
# per GPU (or per core for gloo on CPU). Unset: this machine's GPUs when it has any, else its cores.
TRAINING_MAX_DEVICES = env_int("TRAINING_MAX_DEVICES", 0)
# Whether the training workers have CUDA GPUs, which 4-bit and 8-bit base weights (QLoRA) need: a launch
# asking for them is refused otherwise. "auto": this machine has NVIDIA devices (set it where the web
# tier runs apart from the GPU workers, as TRAINING_MAX_DEVICES).
TRAINING_CUDA = env_str("TRAINING_CUDA", "auto")
# The devices a `gpu` worker advertises, and so the jobs it takes (apps.training.capacity). Unset: the
# GPUs CUDA_VISIBLE_DEVICES gives it, else the machine's GPUs, else its CPU cores.
TRAINING_WORKER_DEVICES = env_int("TRAINING_WORKER_DEVICES", 0)
# A data-parallel job whose processes have not all joined torchrun's rendezvous by then fails with that
# reason (a hung rendezvous would hold the worker forever). Importing torch and starting the process
# group takes seconds; a loaded machine takes longer.
TRAINING_RENDEZVOUS_TIMEOUT_S = env_float("TRAINING_RENDEZVOUS_TIMEOUT_S", 300.0)
# A job run by a cluster's training operator (apps.training.manifests) fails when its relay has read no
# event from the pods for this long: they never started, or died with no restart left.
TRAINING_CLUSTER_SILENCE_S = env_float("TRAINING_CLUSTER_SILENCE_S", 1800.0)
# Jobs across machines (config `nodes`): the most machines one job may ask for. 1 (the default): off, a
# launch asking for more is refused; set it to the number of gpu workers on separate machines that can
# reach each other (each node's torchrun listens on a free port; gloo/NCCL connect between them).
TRAINING_MAX_NODES = env_int("TRAINING_MAX_NODES", 1)
# The address other machines reach this gpu worker at: the first node of a job across machines runs the
# c10d rendezvous store here, on a free port. Default: this machine's hostname.
WORKER_RENDEZVOUS_HOST = env_str("WORKER_RENDEZVOUS_HOST", socket.gethostname())
# Sweeps: the most jobs one sweep launches.
TRAINING_SWEEP_MAX_JOBS = env_int("TRAINING_SWEEP_MAX_JOBS", 16)
COMPARISON_MAX_ACTIVE_PER_PROJECT = env_int("COMPARISON_MAX_ACTIVE_PER_PROJECT", 4)
# Calls a comparison's provider column keeps in flight (the provider's rate limit still holds,
# each refusal waited out): bench/provider_overhead.py measures it against a local column.
COMPARISON_PROVIDER_CONCURRENCY = env_int("COMPARISON_PROVIDER_CONCURRENCY", 8)
# Items a judge, eval or teacher run on a provider's model asks together (a pair is two calls):
# that many requests in flight (its rate limit still holds). A local model's runs fill the
# batcher's row limit instead (INFERENCE_MAX_BATCH_SIZE: apps.evaluation.runner.items_in_flight).
# A canary's quality judge, local or not, keeps to this many: it runs beside live traffic.
JUDGE_CONCURRENCY = env_int("JUDGE_CONCURRENCY", 8)
# How many new captured answers of each version a canary's quality judge scores a tick.
CANARY_JUDGE_BATCH = env_int("CANARY_JUDGE_BATCH", 16)
# --- Serving (playground, OpenAI-compatible API) -----------------------------------------
# Generations run in `inference` workers (`--pool threads`): one model cache per process.
INFERENCE_MEMORY_BUDGET_BYTES = env_int("INFERENCE_MEMORY_BUDGET_BYTES", 8 * 2**30)
# LoRA adapters are loaded beside their base (one copy of each base, whatever the adapters) and
# evicted least recently used once their weights pass this budget, per base; an adapter a running
# request uses stays. A rank-16 adapter on every projection of the demo model is about 19 MB.
INFERENCE_ADAPTER_BUDGET_BYTES = env_int("INFERENCE_ADAPTER_BUDGET_BYTES", 2**30)
# Continuous batching: a model's running batch holds at most this many requests, and new ones
# join it only while its key/value cache, at the widest it can grow, stays within the budget
# (the demo model takes 46 KB a token in fp32: 2 GiB is 32 rows of about 1,400 tokens).
INFERENCE_MAX_BATCH_SIZE = env_int("INFERENCE_MAX_BATCH_SIZE", 32)
INFERENCE_KV_CACHE_BUDGET_BYTES = env_int("INFERENCE_KV_CACHE_BUDGET_BYTES", 2 * 2**30)
# A model with nothing running waits this long after a request for companions to prefill with
# it (a comparison submits its prompts within microseconds); once it runs, newcomers join at the
# next decoding step without waiting.
INFERENCE_MAX_WAIT_MS = env_float("INFERENCE_MAX_WAIT_MS", 2.0)
# Requests that arrive while newcomers are prefilled are prefilled next, up to this many admissions
# in a row before the running rows take their next step (1: a step after every admission). A burst of
# clients then waits for the prefills before it, not for decoding steps between them.
INFERENCE_MAX_PREFILLS_BETWEEN_STEPS = env_int("INFERENCE_MAX_PREFILLS_BETWEEN_STEPS", 4)
INFERENCE_TIMEOUT_S = env_float("INFERENCE_TIMEOUT_S", 300.0)
# The engine's Prometheus figures per (model, adapter) (apps/monitoring/engine_metrics.py): an
# inference worker process labels at most this many pairs on their own, later ones as "other".
# About 40 lines of exposition a pair, published to Redis after every generation.
INFERENCE_METRIC_SERIES_MAX = env_int("INFERENCE_METRIC_SERIES_MAX", 100)
# Fair sharing of /v1 (apps/serving/limits.py): generations running at once and tokens a minute
# (prompt and completion; max_tokens reserved at admission, the real count once it ends), per API
# token and per project; a project's admin may set its own (the project's serving_* fields). 0: no limit.
SERVING_MAX_CONCURRENT_PER_TOKEN = env_int("SERVING_MAX_CONCURRENT_PER_TOKEN", 32)
SERVING_MAX_CONCURRENT_PER_PROJECT = env_int("SERVING_MAX_CONCURRENT_PER_PROJECT", 64)
SERVING_TOKENS_PER_MINUTE_PER_TOKEN = env_int("SERVING_TOKENS_PER_MINUTE_PER_TOKEN", 100_000)
SERVING_TOKENS_PER_MINUTE_PER_PROJECT = env_int("SERVING_TOKENS_PER_MINUTE_PER_PROJECT", 400_000)
# What a thousand tokens (prompt and completion) cost, as the site's admin prices serving; unset: no
# cost figure, only the worker-seconds each version used.
SERVING_PRICE_PER_1K_TOKENS = env_float("SERVING_PRICE_PER_1K_TOKENS", None)
# How long an ended generation keeps its prompt and output on its row (the stream and a late
# non-streaming reader need them for a while); after it, only timings and token counts stay, which is
# all the serving metrics read. Production text is kept only where an alias's request logging asks.
SERVING_TEXT_RETENTION_S = env_float("SERVING_TEXT_RETENTION_S", 3600.0)

# A campaign's agreement numbers are computed by the web process up to this many answers (~30 ms
# of Python); past it a `default` worker computes them, since a longer hold of the GIL stalls
# every other request of the process (bench/sync_views.py).
QUALITY_INLINE_MAX_ANSWERS = env_int("QUALITY_INLINE_MAX_ANSWERS", 2000)

# Workers with `-B` (the embedded default) look for jobs whose worker vanished this often.
CELERY_BEAT_SCHEDULE = {
    "jobs-reap-stale": {"task": "core.reap_stale", "schedule": 60.0, "options": {"queue": "default", "expires": 60}},
    "monitoring-evaluate-alerts": {"task": "monitoring.evaluate_alerts", "schedule": 60.0,
                                   "options": {"queue": "default", "expires": 60}},
    "serving-canary-check": {"task": "serving.canary_check", "schedule": env_float("CANARY_CHECK_INTERVAL_S", 10.0),
                             "options": {"queue": "default", "expires": 30}},
    # A canary's quality judge scores new answers of both versions (a bounded batch a tick).
    "evaluation-canary-judge": {"task": "evaluation.canary_judge",
                                "schedule": env_float("CANARY_JUDGE_INTERVAL_S", 30.0),
                                "options": {"queue": "inference", "expires": 30}},
    "serving-captures-expire": {"task": "serving.captures_expire", "schedule": 3600.0,
                                "options": {"queue": "default", "expires": 3600}},
    "serving-generations-scrub": {"task": "serving.generations_scrub", "schedule": 600.0,
                                  "options": {"queue": "default", "expires": 600}},
}

# --- Monitoring -------------------------------------------------------------------------
# Bearer token for Prometheus scrapes of /metrics; unset: only site staff sessions may read it.
METRICS_TOKEN = env_str("METRICS_TOKEN")
if METRICS_TOKEN is not None and len(METRICS_TOKEN) < 32:
    raise ImproperlyConfigured("METRICS_TOKEN must be at least 32 characters "
                               "(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
# Where alerts are POSTed as JSON (set by the operator, never by users); unset: shown on the page only.
ALERT_WEBHOOK_URL = env_str("ALERT_WEBHOOK_URL")
if ALERT_WEBHOOK_URL is not None and urlsplit(ALERT_WEBHOOK_URL).scheme not in {"http", "https"}:
    raise ImproperlyConfigured("ALERT_WEBHOOK_URL must be an http:// or https:// URL")
ALERT_JOB_FAILED_WINDOW_MIN = env_int("ALERT_JOB_FAILED_WINDOW_MIN", 60)  # a failed job alerts for this long
ALERT_QUEUE_WAIT_MIN = env_int("ALERT_QUEUE_WAIT_MIN", 15)  # the oldest queued fine-tune may wait this long
ALERT_HTTP_ERROR_RATE = env_float("ALERT_HTTP_ERROR_RATE", 0.05)  # share of 5xx answers over the last ~5 min
ALERT_HTTP_MIN_REQUESTS = env_int("ALERT_HTTP_MIN_REQUESTS", 20)  # judged from this many requests on
MONITORING_LIVE_INTERVAL_S = env_float("MONITORING_LIVE_INTERVAL_S", 5.0)  # the dashboard's refresh period

# --- Files ------------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(DATA_DIR / "staticfiles")))
# Embedded default serves straight from the source folders; production runs collectstatic.
WHITENOISE_USE_FINDERS = not PRODUCTION
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(DATA_DIR / "media")))
MEDIA_URL = "/media/"
ARTIFACT_ROOT = Path(env_str("ARTIFACT_ROOT", str(DATA_DIR / "artifacts")))
# Uploaded originals (content-addressed, apps/core/storage.py) go to this S3-compatible bucket when
# it is named, else under ARTIFACT_ROOT/blobs. Credentials come from boto3's standard chain
# (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role), never from settings.
ARTIFACT_S3_BUCKET = env_str("ARTIFACT_S3_BUCKET", "")
ARTIFACT_S3_ENDPOINT_URL = env_str("ARTIFACT_S3_ENDPOINT_URL")  # MinIO, Ceph, R2…; unset: AWS
ARTIFACT_S3_REGION = env_str("ARTIFACT_S3_REGION")  # unset: boto3's (AWS_DEFAULT_REGION, the profile)
ARTIFACT_S3_PREFIX = env_str("ARTIFACT_S3_PREFIX", "blobs/")
# Fine-tunes' checkpoints and adapters in that bucket (apps/training/bucket.py): <prefix>job-<id>/, so
# that a job resumes on another machine; none of them under ARTIFACT_S3_PREFIX.
ARTIFACT_S3_TRAINING_PREFIX = env_str("ARTIFACT_S3_TRAINING_PREFIX", "training/")
if not ARTIFACT_S3_TRAINING_PREFIX.endswith("/") or ARTIFACT_S3_TRAINING_PREFIX.startswith(ARTIFACT_S3_PREFIX):
    raise ImproperlyConfigured("ARTIFACT_S3_TRAINING_PREFIX must end with / and lie outside ARTIFACT_S3_PREFIX")
# Models merged from an adapter in that bucket (apps/registry/weights.py): <prefix>merged-<id>/, so that a
# worker on another machine loads them; outside ARTIFACT_S3_PREFIX and ARTIFACT_S3_TRAINING_PREFIX.
ARTIFACT_S3_MODELS_PREFIX = env_str("ARTIFACT_S3_MODELS_PREFIX", "models/")
if (not ARTIFACT_S3_MODELS_PREFIX.endswith("/") or ARTIFACT_S3_MODELS_PREFIX.startswith(ARTIFACT_S3_PREFIX)
        or ARTIFACT_S3_MODELS_PREFIX.startswith(ARTIFACT_S3_TRAINING_PREFIX)):
    raise ImproperlyConfigured("ARTIFACT_S3_MODELS_PREFIX must end with / and lie outside ARTIFACT_S3_PREFIX and "
                               "ARTIFACT_S3_TRAINING_PREFIX")
# Local copies of bucket blobs (for the readers that need a file), least recently used evicted.
ARTIFACT_BLOB_CACHE_MAX_BYTES = env_int("ARTIFACT_BLOB_CACHE_MAX_BYTES", 10 * 2**30)
# Local copies of models' weights fetched from that bucket (apps/registry/weights.py) on a worker without
# them: least recently used folders evicted past this total, none used in the last 10 minutes; 0: unbounded.
# 50 GiB keeps a few merged 7B models (about 15 GB each in bf16) or hundreds of LoRA adapters.
WEIGHTS_CACHE_MAX_BYTES = env_int("WEIGHTS_CACHE_MAX_BYTES", 50 * 2**30)
if WEIGHTS_CACHE_MAX_BYTES < 0:
    raise ImproperlyConfigured("WEIGHTS_CACHE_MAX_BYTES must be a number of bytes (0: unbounded), got "
                               f"{WEIGHTS_CACHE_MAX_BYTES}")
# Self-hosted servers (MinIO, Ceph) usually answer only path-style requests, AWS prefers virtual-hosted.
ARTIFACT_S3_ADDRESSING_STYLE = env_str("ARTIFACT_S3_ADDRESSING_STYLE",
                                       "path" if ARTIFACT_S3_ENDPOINT_URL else "auto")
if ARTIFACT_S3_ADDRESSING_STYLE not in {"auto", "path", "virtual"}:
    raise ImproperlyConfigured("ARTIFACT_S3_ADDRESSING_STYLE must be auto, path or virtual")
# Encryption at rest of what Workbench writes to the bucket (S3 server-side encryption, asked per
# object): AES256 (keys the bucket's service manages) or aws:kms (with ARTIFACT_S3_SSE_KMS_KEY_ID,
# else the account's default KMS key). Unset: the bucket's own default encryption applies.
ARTIFACT_S3_SSE = env_str("ARTIFACT_S3_SSE", "")
ARTIFACT_S3_SSE_KMS_KEY_ID = env_str("ARTIFACT_S3_SSE_KMS_KEY_ID", "")
if ARTIFACT_S3_SSE not in {"", "AES256", "aws:kms"}:
    raise ImproperlyConfigured("ARTIFACT_S3_SSE must be AES256 or aws:kms (or unset)")
if ARTIFACT_S3_SSE_KMS_KEY_ID and ARTIFACT_S3_SSE != "aws:kms":
    raise ImproperlyConfigured("ARTIFACT_S3_SSE_KMS_KEY_ID needs ARTIFACT_S3_SSE=aws:kms")
MODEL_ROOTS = [Path(p).resolve() for p in env_list("MODEL_ROOTS", [str(DATA_DIR / "models")])]
# A JSON Lines import this large or larger is read by several processes (one per core, up to
# IMPORT_PROCESSES) on PostgreSQL: apps.datasets.importer._load_parts.
IMPORT_PROCESSES = env_int("IMPORT_PROCESSES", 4)
IMPORT_PARALLEL_MIN_BYTES = env_int("IMPORT_PARALLEL_MIN_BYTES", 32 * 1024 * 1024)
DATA_ROOTS = [Path(p).resolve() for p in env_list("DATA_ROOTS", [str(DATA_DIR / "imports")])]
# Models registered by hub id come from the local Hugging Face cache; the server downloads one
# only when a deployment turns MODEL_HUB_DOWNLOADS on (safetensors and config files only).
HF_HUB_CACHE = Path(env_str("HF_HUB_CACHE", str(Path.home() / ".cache" / "huggingface" / "hub"))).resolve()
MODEL_HUB_DOWNLOADS = env_bool("MODEL_HUB_DOWNLOADS", False)

# --- Outside model providers -------------------------------------------------------------
# Fernet keys (comma-separated, newest first) that encrypt providers' API keys at rest
# (apps/providers/crypto.py): the first encrypts, all of them decrypt, so a new key goes in front
# and `manage.py rotate_provider_keys` re-encrypts every row before the old one is dropped.
# Unset outside production: one key generated once in the data folder, like SECRET_KEY.
PROVIDER_KEYS = env_list("PROVIDER_KEYS", [])
if not PROVIDER_KEYS and not PRODUCTION:
    _provider_key_file = DATA_DIR / "provider_key"
    if not _provider_key_file.exists():
        import base64

        try:  # O_EXCL: two processes starting together agree on one key
            _fd = os.open(_provider_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(_fd, "w") as _handle:
                _handle.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())
    PROVIDER_KEYS = [_provider_key_file.read_text().strip()]
# How long one provider call may take, and the most tokens one may ask for.
PROVIDER_MAX_TIMEOUT_S = env_float("PROVIDER_MAX_TIMEOUT_S", 300.0)

# --- Requests ---------------------------------------------------------------------------
# Bodies above this are answered 413 by the ASGI layer before Django reads them.
MAX_REQUEST_BODY_BYTES = env_int("MAX_REQUEST_BODY_BYTES", 20 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# Dataset and catalogue model uploads may be larger; Django spools them to temporary files, never to memory.
MAX_UPLOAD_BYTES = env_int("MAX_UPLOAD_BYTES", 2 * 1024**3)
UPLOAD_PATHS = r"^/((api/)?projects/\d+/datasets/\d+/imports|api/catalogue/upload|models/catalogue-upload)/$"

# --- Auth -------------------------------------------------------------------------------
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, refusing passwords when LOCAL_PASSWORD_LOGIN is off (break-glass users aside).
    "apps.accounts.backends.LocalPasswordBackend",
    # Holds the sessions single sign-on opens (it checks no password), so they can be told apart.
    "apps.accounts.backends.SsoBackend",
    "guardian.backends.ObjectPermissionBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "projects:list"
LOGOUT_REDIRECT_URL = "accounts:login"
INVITATION_TTL = timedelta(days=env_int("INVITATION_TTL_DAYS", 7))
# No implicit anonymous principal in the policy layer, and no "AnonymousUser" account (django-guardian
# reads ANONYMOUS_USER_NAME: the GUARDIAN_-prefixed name used before did nothing).
ANONYMOUS_USER_NAME = None
# API tokens and members' project permissions kept across requests by each process, outdated for all
# by any change to them (apps/core/principal_cache.py). Off: read from the database every request.
PRINCIPAL_CACHE = env_bool("PRINCIPAL_CACHE", True)

# Brute-force protection: five failures for one username from one IP lock that pair out.
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
# Only this many reverse proxies are trusted for X-Forwarded-For (0: ignore the header).
AXES_IPWARE_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if AXES_IPWARE_PROXY_COUNT else ["REMOTE_ADDR"]
)

# --- Single sign-on (OpenID Connect) -------------------------------------------------------
# django-allauth's social accounts carry the protocol (authorization code + PKCE, single-use state,
# discovery, issuer/audience/expiry checks; accounts keyed on the provider's `sub`), and
# apps/accounts/oidc.py adds what its openid_connect provider leaves out: a nonce, and the ID token's
# signature always checked against the provider's JWKS. Chosen over mozilla-django-oidc, which serves
# one provider without discovery, matches accounts by email and does not check the audience.
# SSO_PROVIDERS=corp,partner and per provider SSO_<ID>_DISCOVERY_URL, _CLIENT_ID, _CLIENT_SECRET,
# optionally _NAME (the login button) and _GROUPS_CLAIM (default "groups").
def _sso_providers() -> list[dict]:
    providers = []
    for provider_id in env_list("SSO_PROVIDERS", []):
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", provider_id):
            raise ImproperlyConfigured(f"SSO_PROVIDERS: {provider_id!r} is not a lower-case id (a-z, 0-9, -)")
        prefix = "SSO_" + provider_id.upper().replace("-", "_") + "_"
        provider = {"id": provider_id, "name": env_str(prefix + "NAME", provider_id),
                    "discovery_url": env_str(prefix + "DISCOVERY_URL"), "client_id": env_str(prefix + "CLIENT_ID"),
                    "secret": env_str(prefix + "CLIENT_SECRET", ""),
                    "groups_claim": env_str(prefix + "GROUPS_CLAIM", "groups")}
        if not provider["discovery_url"] or not provider["client_id"]:
            raise ImproperlyConfigured(f"{prefix}DISCOVERY_URL and {prefix}CLIENT_ID must be set")
        if PRODUCTION and urlsplit(provider["discovery_url"]).scheme != "https":
            raise ImproperlyConfigured(f"{prefix}DISCOVERY_URL must be https:// in production")
        providers.append(provider)
    return providers


SSO_PROVIDERS = _sso_providers()
if SSO_PROVIDERS and not PROVIDER_KEYS:
    # A single-sign-on session keeps its refresh token encrypted with these (apps/accounts/sso.py).
    raise ImproperlyConfigured("PROVIDER_KEYS must be set to use SSO_PROVIDERS (refresh tokens are kept encrypted)")
# Create an account on a first sign-in (else an admin creates it, or links an existing one).
SSO_AUTO_CREATE = env_bool("SSO_AUTO_CREATE", False)
# Only people whose email is in these domains may sign in with a provider (empty: any domain).
SSO_ALLOWED_EMAIL_DOMAINS = [d.lower().lstrip("@") for d in env_list("SSO_ALLOWED_EMAIL_DOMAINS", [])]
# How often a single-sign-on session is re-checked with its provider (refresh token; 0: never).
SSO_REVALIDATE_S = env_int("SSO_REVALIDATE_S", 300)
# The provider's discovery document and signing keys are kept this long (an unknown key id refetches).
SSO_METADATA_CACHE_S = env_int("SSO_METADATA_CACHE_S", 300)
# Off: only the break-glass accounts (usernames) may log in with a password; everyone else signs in
# with a provider.
LOCAL_PASSWORD_LOGIN = env_bool("LOCAL_PASSWORD_LOGIN", True)
BREAK_GLASS_USERS = env_list("BREAK_GLASS_USERS", [])
if not LOCAL_PASSWORD_LOGIN and not SSO_PROVIDERS:
    raise ImproperlyConfigured("LOCAL_PASSWORD_LOGIN=false needs at least one provider in SSO_PROVIDERS")
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"provider_class": "apps.accounts.oidc.WorkbenchOIDCProvider"}}
SOCIALACCOUNT_ADAPTER = "apps.accounts.oidc.SsoAccountAdapter"
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_LOGIN_ON_GET = False  # starting a sign-in is a POST from the login page (CSRF-checked)
SOCIALACCOUNT_REQUESTS_TIMEOUT = 10
ACCOUNT_EMAIL_VERIFICATION = "none"

# --- API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "apps.core.pagination.Pagination",
    # Bodies are JSON (the dataset upload, which takes a file, says so itself): the schema then
    # advertises what the endpoints really read.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer",
                                 "rest_framework.renderers.BrowsableAPIRenderer"],
    "EXCEPTION_HANDLER": "apps.core.api.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["apps.accounts.throttling.TokenRateThrottle",
                                 "apps.accounts.throttling.SessionUserRateThrottle",
                                 "rest_framework.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"token": env_str("TOKEN_RATE_LIMIT", "600/min"),
                               "user": env_str("USER_RATE_LIMIT", "1200/min"),
                               "anon": env_str("ANON_RATE_LIMIT", "60/min")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Workbench API",
    "DESCRIPTION": "Projects, datasets, annotation, fine-tuning and comparison.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies get their own components, which carry what is asked of input (minLength: 1 for
    # a required string that may not be blank) and leave out read-only fields.
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Over a hundred operations: Swagger UI draws expanded tags only as they scroll into view, so
    # open with the tags folded and a filter box, where every tag is one line.
    "SWAGGER_UI_SETTINGS": {"docExpansion": "none", "filter": True, "deepLinking": True},
    # Jobs of different kinds share the field name "state" with different choices: name each set.
    "ENUM_NAME_OVERRIDES": {"ImportJobState": "apps.datasets.models.ImportJob.State",
                            "JobState": "apps.core.jobs.JobState",
                            "ModelExportFormat": "apps.registry.models.ModelExport.Format"},
    # The OpenAI-compatible /v1 views are plain async Django views: their paths are added here.
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "apps.serving.openapi.add_openai_paths"],
}

# Sessions are read from the shared cache (written through to the database, read from it when the
# cache lost them): one query fewer on every page and socket of a logged-in person.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

# --- Security headers -------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True  # pages pass the token to JS through a <meta> tag
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Probes talk plain HTTP inside the cluster.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    if env_bool("TRUST_X_FORWARDED_PROTO", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Misc -------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# LOG_FORMAT=json: one JSON object per line (workbench/logs.py) from the web (uvicorn's own
# loggers included) and the workers (CELERY_WORKER_HIJACK_ROOT_LOGGER is off).
LOG_FORMAT = env_str("LOG_FORMAT", "plain")
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured("LOG_FORMAT must be plain or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
                   "json": {"()": "workbench.logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"axes": {"level": "WARNING"},
                **({name: {"handlers": ["console"], "propagate": False}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")} if LOG_FORMAT == "json" else {})},
}
