"""Settings come from the environment and refuse unsafe production values."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = "k" * 20 + "Zq8vN3xL0pT6sW2yR9uB4eH7jM1cF5aD"


def run_django(env_overrides: dict, code: str = "import django; django.setup(); print('ok')",
               argv: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "WORKBENCH_ENV", "ALLOWED_HOSTS", "DEBUG",
                         "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    env["DJANGO_SETTINGS_MODULE"] = "workbench.settings"
    env.update(env_overrides)
    command = argv or [sys.executable, "-c", code]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def production_env(tmp_path, **overrides) -> dict:
    env = {"WORKBENCH_ENV": "production", "SECRET_KEY": STRONG_KEY, "ALLOWED_HOSTS": "workbench.example.org",
           "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3", "REDIS_URL": "redis://127.0.0.1:6379/0",
           "WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("overrides, complaint", [
    ({"SECRET_KEY": None}, "SECRET_KEY must be set"),
    ({"SECRET_KEY": "django-insecure-" + "a" * 60}, "SECRET_KEY is too weak"),
    ({"SECRET_KEY": "short"}, "SECRET_KEY is too weak"),
    ({"ALLOWED_HOSTS": "*"}, "ALLOWED_HOSTS must list"),
    ({"ALLOWED_HOSTS": None}, "ALLOWED_HOSTS must list"),
    ({"DEBUG": "true"}, "DEBUG must not be on"),
    ({"DATABASE_URL": None}, "DATABASE_URL must be set"),
    ({"REDIS_URL": None}, "REDIS_URL must be set"),
    ({"DEBUG": "maybe"}, "DEBUG must be a boolean"),
    ({"SSO_PROVIDERS": "corp", "SSO_CORP_DISCOVERY_URL": "https://id.example.org/o", "SSO_CORP_CLIENT_ID": "wb"},
     "PROVIDER_KEYS must be set to use SSO_PROVIDERS"),
])
def test_production_refuses_to_start_with_unsafe_settings(tmp_path, overrides, complaint):
    result = run_django(production_env(tmp_path, **overrides))
    assert result.returncode != 0
    assert complaint in result.stderr


def test_deploy_checks_pass_under_production_settings(tmp_path):
    result = run_django(production_env(tmp_path),
                        argv=[sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_embedded_default_generates_a_secret_once_and_keeps_it_private(tmp_path):
    env = {"WORKBENCH_DATA_DIR": str(tmp_path)}
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    first = run_django(env, code)
    second = run_django(env, code)
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "secret_key"
    assert first.stdout.strip() == second.stdout.strip() == key_file.read_text().strip()
    assert len(first.stdout.strip()) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_embedded_default_uses_sqlite_and_a_unix_socket_redis(tmp_path):
    code = ("from django.conf import settings; print(settings.DATABASES['default']['ENGINE']); "
            "print(settings.CELERY_BROKER_URL); print(settings.CHANNEL_LAYERS['default']['CONFIG']['hosts'][0]['address'])")
    result = run_django({"WORKBENCH_DATA_DIR": str(tmp_path)}, code)
    engine, broker, channels_host = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert broker == f"redis+socket://{tmp_path}/redis.sock"
    assert channels_host == f"unix://{tmp_path}/redis.sock"


def test_postgresql_gets_a_connection_pool_and_a_web_process_per_core(tmp_path):
    show = ("import django, os; django.setup(); from django.conf import settings; "
            "print(settings.DATABASES['default'].get('OPTIONS', {}).get('pool'), settings.WEB_WORKERS, "
            "min(os.cpu_count() or 1, 4))")
    env = {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/any", "REDIS_URL": "redis://127.0.0.1:6379/0",
           "WORKBENCH_DATA_DIR": str(tmp_path)}
    pooled = run_django(env, show)
    assert pooled.returncode == 0, pooled.stderr
    pool, workers, cores = pooled.stdout.rsplit(" ", 2)
    assert pool == "{'min_size': 1, 'max_size': 10, 'timeout': 10}" and workers == cores.strip()
    tuned = run_django({**env, "DB_POOL_MAX_SIZE": "3", "WEB_WORKERS": "3"}, show)
    assert tuned.stdout.startswith("{'min_size': 1, 'max_size': 3, 'timeout': 10} 3 ")
    assert run_django({**env, "DB_POOL": "0"}, show).stdout.startswith("None ")
    embedded = run_django({"WORKBENCH_DATA_DIR": str(tmp_path / "embedded")}, show)
    assert embedded.stdout.startswith("None 1 "), embedded.stderr  # SQLite: no pool, one web process
