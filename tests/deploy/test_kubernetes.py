"""deploy/k8s: valid against the Kubernetes and KEDA schemas offline, and consistent with the
product (entry points, queues and their Redis lists, variables, probes, the job table)."""

from types import SimpleNamespace

import kubernetes_validate
import pydantic
import pytest
import yaml
from cloudcoil.models.keda import v1alpha1 as keda
from django.db import connection
from django.urls import resolve
from kombu.transport.redis import Channel as RedisChannel

from apps.core import views as core_views
from apps.core.jobs import ACTIVE_STATES
from apps.monitoring.broker import _redis_list_names
from apps.training.models import BROKER_PRIORITY, TrainingJob
from tests.deploy.entry_points import DEPLOY, check_celery_command, known_variables, production_uvicorn_command
from tests.training.fixtures import make_job

pytestmark = pytest.mark.timeout(60)

K8S = DEPLOY / "k8s"
# The oldest Kubernetes the manifests target (the preStop sleep action is 1.30+).
KUBERNETES_VERSION = "1.30.0"
# A trigger's metadata is a free map in KEDA's schema: the keys its redis and postgresql scalers
# read (KEDA 2.x docs), so a misspelt one fails here instead of being ignored by the cluster.
TRIGGER_METADATA_KEYS = {
    "redis": {"address", "host", "port", "databaseIndex", "listName", "listLength", "activationListLength",
              "enableTLS", "unsafeSsl", "usernameFromEnv", "passwordFromEnv"},
    "postgresql": {"query", "targetQueryValue", "activationTargetQueryValue"},
}
KEDA_KINDS = {"ScaledObject": keda.ScaledObject, "TriggerAuthentication": keda.TriggerAuthentication}


@pytest.fixture(scope="module")
def documents() -> list[dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    on_disk = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk, "kustomization.yaml and the folder disagree"
    return [doc for name in listed for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def of_kind(documents, kind) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in documents if d["kind"] == kind}


def pod_specs(documents) -> dict[str, dict]:
    specs = {name: d["spec"]["template"]["spec"] for name, d in of_kind(documents, "Deployment").items()}
    specs.update({name: d["spec"]["template"]["spec"] for name, d in of_kind(documents, "Job").items()})
    return specs


def test_every_manifest_is_valid_against_its_schema(documents):
    for doc in documents:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in KEDA_KINDS:
            try:
                model = KEDA_KINDS[doc["kind"]].model_validate(doc)
            except pydantic.ValidationError as exc:
                pytest.fail(f"{where}: {exc}")
            # The models ignore unknown fields: one dropped on the way through was misspelt.
            assert model.model_dump(by_alias=True, exclude_unset=True) == doc, f"{where}: unknown fields"
            for trigger in doc["spec"].get("triggers", []):
                unknown = set(trigger["metadata"]) - TRIGGER_METADATA_KEYS[trigger["type"]]
                assert not unknown, f"{where}: {trigger['type']} trigger does not read {unknown}"
        else:
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


def test_images_are_the_dockerfile_targets(documents):
    images = {c["image"] for spec in pod_specs(documents).values()
              for c in spec["containers"] + spec.get("initContainers", [])}
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert images == {"workbench-cpu", "workbench-gpu"}
    assert {i["name"]: i["newTag"] for i in kustomization["images"]} == {"workbench-cpu": "cpu", "workbench-gpu": "gpu"}


def test_commands_are_the_products_entry_points(documents):
    consumed = set()
    for name, spec in pod_specs(documents).items():
        command = spec["containers"][0]["command"]
        if "uvicorn" in command:
            assert command == production_uvicorn_command()
        elif command[:2] == ["python", "manage.py"]:
            assert command[2:] == ["migrate", "--noinput"], name
        else:
            params = check_celery_command(command)
            consumed.update(params.get("queues", []))
    assert consumed == {"default", "gpu", "inference"}


def test_web_waits_for_migrations_and_probes_health_endpoints(documents):
    web = pod_specs(documents)["workbench-web"]
    assert "migrate --check" in " ".join(web["initContainers"][0]["command"])
    container = web["containers"][0]
    allowed_hosts = of_kind(documents, "ConfigMap")["workbench-config"]["data"]["ALLOWED_HOSTS"].split(",")
    for probe, view in (("livenessProbe", core_views.healthz), ("readinessProbe", core_views.readyz)):
        get = container[probe]["httpGet"]
        assert resolve(get["path"]).func is view, probe
        # Django refuses a Host outside ALLOWED_HOSTS (the kubelet sends the pod's address).
        assert {h["value"] for h in get["httpHeaders"] if h["name"] == "Host"} <= set(allowed_hosts)
    ingress = of_kind(documents, "Ingress")["workbench"]["spec"]
    assert ingress["tls"] and ingress["tls"][0]["hosts"] == allowed_hosts


def test_environment_holds_only_variables_the_product_reads(documents):
    known = known_variables()
    sources = {**of_kind(documents, "ConfigMap"), **of_kind(documents, "Secret")}
    for spec in pod_specs(documents).values():
        for container in spec["containers"] + spec.get("initContainers", []):
            for ref in container.get("envFrom", []):
                source = ref.get("configMapRef") or ref.get("secretRef")
                data = sources[source["name"]].get("data") or sources[source["name"]].get("stringData")
                assert set(data) <= known, f"{source['name']} sets {set(data) - known}, which nothing reads"
            assert {e["name"] for e in container.get("env", [])} <= known


def test_pods_are_locked_down_and_request_resources(documents):
    for name, spec in pod_specs(documents).items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"] + spec.get("initContainers", []):
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
            assert "memory" in container["resources"]["limits"], name


def test_gpu_workers_request_a_gpu_on_gpu_nodes(documents):
    for name in ("workbench-worker-gpu", "workbench-worker-inference"):
        spec = pod_specs(documents)[name]
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert spec["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
        assert spec["containers"][0]["image"] == "workbench-gpu"


def test_inference_memory_covers_its_model_cache(documents):
    budget = int(of_kind(documents, "ConfigMap")["workbench-config"]["data"]["INFERENCE_MEMORY_BUDGET_BYTES"])
    resources = pod_specs(documents)["workbench-worker-inference"]["containers"][0]["resources"]
    assert budget < _bytes(resources["requests"]["memory"]) <= _bytes(resources["limits"]["memory"])


def _bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else int(quantity)


def test_web_scales_on_cpu_and_every_pool_keeps_serving_through_disruptions(documents):
    hpa = of_kind(documents, "HorizontalPodAutoscaler")["workbench-web"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "workbench-web"
    assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]
    deployments = of_kind(documents, "Deployment")
    budgets = of_kind(documents, "PodDisruptionBudget")
    for budget in budgets.values():
        selector = budget["spec"]["selector"]["matchLabels"]
        assert any(d["spec"]["template"]["metadata"]["labels"] == selector for d in deployments.values())
    assert set(deployments) - {"workbench-beat"} == set(budgets), "a pool without a PodDisruptionBudget"
    assert deployments["workbench-beat"]["spec"]["replicas"] == 1


def test_every_worker_pool_scales_on_its_own_queue(documents):
    """Each ScaledObject reads the Redis lists of the queue its Deployment consumes, as kombu
    names them; the gpu pool reads every priority list a fine-tune can be sent to and scales to zero."""
    channel = SimpleNamespace(sep=RedisChannel.sep, priority_steps=RedisChannel.priority_steps)
    deployments = of_kind(documents, "Deployment")
    scaled = of_kind(documents, "ScaledObject")
    workers = {name for name, d in deployments.items() if "worker" in d["spec"]["template"]["spec"]["containers"][0]["command"]}
    assert {s["spec"]["scaleTargetRef"]["name"] for s in scaled.values()} == workers
    for item in scaled.values():
        target = deployments[item["spec"]["scaleTargetRef"]["name"]]
        assert "replicas" not in target["spec"], "KEDA owns the replica count"
        queue, = check_celery_command(target["spec"]["template"]["spec"]["containers"][0]["command"])["queues"]
        lists = {t["metadata"]["listName"] for t in item["spec"]["triggers"] if t["type"] == "redis"}
        assert lists and lists <= set(_redis_list_names(channel, queue)), (queue, lists)
        if queue == "gpu":
            steps = {min(s for s in channel.priority_steps if s >= p) for p in BROKER_PRIORITY.values()}
            assert {queue if s == 0 else f"{queue}{channel.sep}{s}" for s in steps} <= lists
            assert item["spec"]["minReplicaCount"] == 0


def test_gpu_pool_counts_queued_and_running_jobs_from_the_real_table(documents, project, owner):
    """The KEDA PostgreSQL query runs on the migrated schema and counts exactly the active jobs."""
    for state in ("queued", "running", "running", "succeeded", "failed", "cancelled"):
        make_job(project, owner, state=state)
    trigger, = [t for t in of_kind(documents, "ScaledObject")["workbench-worker-gpu"]["spec"]["triggers"]
                if t["type"] == "postgresql"]
    query = trigger["metadata"]["query"]
    assert TrainingJob._meta.db_table in query
    for state in ACTIVE_STATES:
        assert f"'{state}'" in query
    with connection.cursor() as cursor:
        cursor.execute(query)
        (count,) = cursor.fetchone()
    assert count == TrainingJob.objects.filter(state__in=ACTIVE_STATES).count() == 3


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def test_network_policies_let_only_the_ingress_reach_the_web_and_only_workbench_reach_the_data(documents):
    policies = of_kind(documents, "NetworkPolicy")
    deny = policies["workbench-default-deny-ingress"]["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and not deny.get("ingress")
    web = of_kind(documents, "Deployment")["workbench-web"]["spec"]["template"]
    web_ports = {port["name"] for c in web["spec"]["containers"] for port in c.get("ports", [])}
    allowed = [policy["spec"] for policy in policies.values() if policy["spec"].get("ingress")]
    for spec in allowed:  # every opening names a port the web pods serve, and only the web pods
        assert _selects(spec["podSelector"], web["metadata"]["labels"])
        assert {port["port"] for rule in spec["ingress"] for port in rule["ports"]} <= web_ports
    for name, deployment in of_kind(documents, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if labels["app.kubernetes.io/component"] != "web":
            assert not any(_selects(spec["podSelector"], labels) for spec in allowed), f"{name} takes connections"

    data = list(yaml.safe_load_all((DEPLOY / "k8s-data" / "access-policy.yaml").read_text()))
    namespace = yaml.safe_load((K8S / "kustomization.yaml").read_text())["namespace"]
    for doc in data:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        (rule,) = doc["spec"]["ingress"]
        (source,) = rule["from"]
        assert source["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
        for name in pod_specs(documents):  # every Workbench pod is one of those let in
            deployment = {**of_kind(documents, "Deployment"), **of_kind(documents, "Job")}[name]
            assert _selects(source["podSelector"], deployment["spec"]["template"]["metadata"]["labels"]), name
    assert {doc["spec"]["ingress"][0]["ports"][0]["port"] for doc in data} == {5432, 6379}
