"""The boundaries the architecture fixes, checked over the whole tree: the engine (workers/) is
plain Python and torch with no Django, Celery or apps; every Celery task lives in its app's
tasks.py under the name queued messages carry; loading every task leaves torch out of a web process."""

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASK_NAMES = {"annotation.export", "annotation.quality", "annotation.suggest", "comparison.run", "core.reap_stale", "datasets.derive",
              "datasets.export", "datasets.import", "datasets.index_search", "evaluation.canary_judge", "evaluation.eval_run", "evaluation.judge_run",
              "evaluation.teacher_run",
              "monitoring.evaluate_alerts", "registry.convert", "registry.export", "registry.inspect", "registry.measure_precisions",
              "registry.merge",
              "registry.prepare_catalogue", "serving.canary_check", "serving.captures_expire", "serving.classify",
              "serving.generate",
              "serving.generations_scrub", "training.calibrate", "training.join",
              "training.run"}


def test_no_module_of_the_engine_imports_django_celery_or_the_apps():
    pattern = re.compile(r"^\s*(import|from)\s+(django|celery|kombu|channels|rest_framework|apps|workbench)\b",
                         re.MULTILINE)
    modules = sorted((REPO / "workers").rglob("*.py"))
    assert len(modules) > 30 and {p.parent.name for p in modules} >= {"ingest", "pii", "models", "training",
                                                                       "inference", "comparison"}
    offenders = [str(p.relative_to(REPO)) for p in modules if pattern.search(p.read_text())]
    assert offenders == []


def test_every_task_is_in_its_apps_tasks_module_under_its_queued_name_and_no_web_process_loads_torch():
    code = ("import json, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'workbench.settings'); import django; "
            "django.setup(); from workbench.celery import app; app.loader.import_default_modules(); "
            "import apps.datasets.services, apps.training.services, apps.serving.services, apps.comparison.services; "
            "print(json.dumps({n: t.__module__ for n, t in app.tasks.items() if not n.startswith('celery.')})); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=120)
    registered, torch_loaded = out.stdout.strip().splitlines()[-2:]
    tasks = json.loads(registered)
    assert set(tasks) == TASK_NAMES
    assert all(module == f"apps.{name.split('.')[0]}.tasks" for name, module in tasks.items()), tasks
    assert torch_loaded == "False"
    assert not (REPO / "workers" / "tasks.py").exists()


# What one app may import of another: its models, services, selectors and events, and these
# shared modules, each for a reason. Anything else (views, API, forms, serializers, runners,
# importers...) is the app's own business; a new reach into it fails here.
PUBLIC_MODULES = {"models", "services", "selectors", "events"}
SHARED_MODULES = {
    # The one policy layer and what every app builds on it: audit, sockets, the manager-only mixin.
    "apps.projects.policy", "apps.projects.permissions", "apps.projects.audit", "apps.projects.sockets",
    "apps.projects.serializers",
    # The API's bearer tokens and throttles (DRF plug-ins), and the project's token page (accounts'
    # view, mounted under the project's URLs).
    "apps.accounts.authentication", "apps.accounts.throttling", "apps.accounts.views",
    # The one way a version is written: annotation exports and comparison results become versions.
    "apps.datasets.writer",
    # The inference worker's model cache and batcher: comparisons and suggestions share it.
    "apps.serving.runner",
    # Its classifiers (kept loaded per inference worker): a campaign's suggestions from a classifier.
    "apps.serving.classify",
    # Where a model's weights are on this machine (fetched from the artifact bucket): every loader asks it.
    "apps.registry.weights",
    # The inference engine's figures: the runner hands its batcher this observer, which publishes
    # them the way monitoring carries every worker's figures to the web (Redis, with a TTL).
    "apps.monitoring.engine_metrics",
}


def test_apps_reach_each_other_only_through_models_services_selectors_events_and_the_shared_modules():
    import grimp

    graph = grimp.build_graph("apps", include_external_packages=False)
    reaches = set()
    for importer in graph.modules:
        own = importer.split(".")[1:2]
        for imported in graph.find_modules_directly_imported_by(importer):
            parts = imported.split(".")
            if len(parts) < 3 or parts[1:2] == own or parts[1] == "core":  # apps.core is the bottom layer
                continue
            module = ".".join(parts[:3])
            if parts[2] not in PUBLIC_MODULES and module not in SHARED_MODULES:
                reaches.add(f"{importer} -> {imported}")
    assert len(graph.modules) > 100
    assert sorted(reaches) == []
