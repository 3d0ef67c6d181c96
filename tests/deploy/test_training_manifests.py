"""deploy/k8s-training: a job across machines as a Kubeflow PyTorchJob or a JobSet, rendered for a real
queued job by `manage.py training_manifest`.

No package here carries the PyTorchJob or JobSet schemas as a validator (kubeflow-training, the
operator's SDK, brings the whole Kubernetes client and models that ignore unknown fields; JobSet has none),
so: the pods (and JobSet's Job) are validated against the Kubernetes schema with kubernetes_validate, as
core PodTemplate and Job documents, and the fields above them against the CRDs' fields (SCHEMAS: names
and types from kubeflow.org/v1 and jobset.x-k8s.io/v1alpha2), unknown ones refused. The pods are checked
against the gpu workers' (deploy/k8s/workers.yaml): image, pool, settings, volumes. Then the rendered
command of each replica of a 2 x 1 PyTorchJob runs here as the operator would start it (gloo, loopback)
and trains the job to its adapter in the folder the product reads."""

import io
import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.utils import timezone
from torch.distributed.run import get_args_parser

from apps.registry.weights import local_weights
from apps.training.models import MetricPoint, TrainingJob
from apps.training.runner import output_dir
from tests.conftest import child_process_env, die_with_the_test_run, free_port, wait_for
from tests.deploy.entry_points import DEPLOY, known_variables
from tests.deploy.test_kubernetes import KUBERNETES_VERSION
from tests.training.fixtures import FAST
from workers.training import TrainConfig
from workers.training.distributed import EVENTS, SPEC

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

TRAINING = DEPLOY / "k8s-training"
POD = "pod"  # where SCHEMAS hands over to the Kubernetes schema
# The CRD fields above the pods: a dict is an object whose keys must be among its own; {str: X} a map.
REPLICA = {"replicas": int, "restartPolicy": str, "template": POD}
META = {"name": str, "namespace": str, "labels": {str: str}}
SCHEMAS = {
    ("kubeflow.org/v1", "PyTorchJob"): {
        "apiVersion": str, "kind": str, "metadata": META,
        "spec": {"nprocPerNode": str, "elasticPolicy": dict, "pytorchReplicaSpecs": {str: REPLICA},
                 "runPolicy": {"activeDeadlineSeconds": int, "backoffLimit": int, "cleanPodPolicy": str,
                               "managedBy": str, "schedulingPolicy": dict, "suspend": bool,
                               "ttlSecondsAfterFinished": int}}},
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): {
        "apiVersion": str, "kind": str, "metadata": META,
        "spec": {"failurePolicy": {"maxRestarts": int, "restartStrategy": str, "rules": list},
                 "network": {"enableDNSHostnames": bool, "subdomain": str, "publishNotReadyAddresses": bool},
                 "ttlSecondsAfterFinished": int, "suspend": bool, "managedBy": str, "successPolicy": dict,
                 "startupPolicy": dict, "coordinator": dict,
                 "replicatedJobs": [{"name": str, "replicas": int, "dependsOn": list,
                                     "template": {"metadata": dict, "spec": "job"}}]}},
}
CLEAN_POD_POLICIES = {"None", "Running", "All"}
RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}


def check_fields(value, schema, where: str, found: list) -> None:
    """Refuse a field the CRD does not have or of the wrong type; collect the pods and jobs for
    kubernetes_validate (`found`: (kind, value, where))."""
    if schema in (POD, "job"):
        found.append((schema, value, where))
    elif isinstance(schema, dict) and list(schema) == [str]:
        assert isinstance(value, dict), where
        for key, item in value.items():
            check_fields(item, schema[str], f"{where}.{key}", found)
    elif isinstance(schema, dict):
        assert isinstance(value, dict), f"{where}: an object"
        unknown = set(value) - set(schema)
        assert not unknown, f"{where}: no such field {unknown}"
        for key, item in value.items():
            check_fields(item, schema[key], f"{where}.{key}", found)
    elif isinstance(schema, list):
        assert isinstance(value, list), f"{where}: a list"
        for i, item in enumerate(value):
            check_fields(item, schema[0], f"{where}[{i}]", found)
    elif schema is bool:
        assert isinstance(value, bool), f"{where}: true or false"
    else:
        assert isinstance(value, schema) and not isinstance(value, bool), f"{where}: {schema.__name__}"


def validate(document: dict) -> list[dict]:
    """Fail on anything the CRD or Kubernetes would refuse; return the pod specs."""
    schema = SCHEMAS[(document["apiVersion"], document["kind"])]
    found = []
    check_fields(document, schema, document["kind"], found)
    pods = []
    for kind, value, where in found:
        if kind == POD:
            core = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": value}
            pods.append(value["spec"])
        else:
            core = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"}, "spec": value}
            pods.append(value["template"]["spec"])
        try:
            kubernetes_validate.validate(core, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")
    return pods


@pytest.fixture
def queued_job(project, owner, tiny_model, qa_version, settings, tmp_path):
    """A queued fine-tune of the tiny model, as a launch leaves it (its config resolved), not sent to a worker;
    its artifact folder is the test's own."""
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"

    def make(**config):
        resolved = TrainConfig.from_dict({**FAST, **config}).as_dict()
        return TrainingJob.objects.create(project=project, name="Cluster run", base_model=tiny_model,
                                          dataset_version=qa_version, train_split="train", eval_split="validation",
                                          config=resolved, created_by=owner)
    return make


def render_documents(job_id, *args) -> list[dict]:
    """The training job and its relay, as the command prints them."""
    out = io.StringIO()
    call_command("training_manifest", str(job_id), *args, stdout=out)
    return list(yaml.safe_load_all(out.getvalue()))


def render(job_id, *args) -> dict:
    return render_documents(job_id, *args)[0]


def gpu_worker_pod() -> dict:
    workers = yaml.safe_load_all((DEPLOY / "k8s" / "workers.yaml").read_text())
    return next(d for d in workers if d["metadata"]["name"] == "workbench-worker-gpu")["spec"]["template"]["spec"]


def torchrun_args(command: list[str]):
    assert command[:3] == ["python", "-m", "torch.distributed.run"], command
    return get_args_parser().parse_args(command[3:])


def test_the_templates_are_valid_as_they_stand():
    for name in ("pytorchjob.yaml", "jobset.yaml"):
        document = yaml.safe_load((TRAINING / name).read_text())
        assert validate(document), name
    # Optional CRDs: not applied with the rest of the cluster.
    assert "k8s-training" not in (DEPLOY / "k8s" / "kustomization.yaml").read_text()


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
@pytest.mark.parametrize("nodes, devices", [(1, 1), (2, 2), (4, 1)])
def test_a_rendered_manifest_is_valid_and_runs_the_gpu_workers_command_over_the_jobs_spec(queued_job, kind, nodes,
                                                                                         devices):
    job = queued_job()
    document = render(job.pk, "--kind", kind, "--nodes", str(nodes), "--devices", str(devices))
    pods = validate(document)
    name = f"workbench-job-{job.pk}"
    assert document["metadata"]["name"] == name and document["metadata"]["labels"]["workbench/job"] == str(job.pk)
    if kind == "pytorchjob":
        replicas = document["spec"]["pytorchReplicaSpecs"]
        assert sum(r["replicas"] for r in replicas.values()) == nodes and replicas["Master"]["replicas"] == 1
        assert set(replicas) == ({"Master", "Worker"} if nodes > 1 else {"Master"})
        assert document["spec"]["nprocPerNode"] == str(devices)
        assert document["spec"]["runPolicy"]["cleanPodPolicy"] in CLEAN_POD_POLICIES
        assert {r["restartPolicy"] for r in replicas.values()} <= RESTART_POLICIES
        assert all(pod["containers"][0]["name"] == "pytorch" for pod in pods)  # the operator's container
        endpoint = "$(MASTER_ADDR):$(MASTER_PORT)"
    else:
        (replicated,) = document["spec"]["replicatedJobs"]
        job_spec = replicated["template"]["spec"]
        assert (replicated["replicas"], job_spec["parallelism"], job_spec["completions"]) == (1, nodes, nodes)
        assert job_spec["completionMode"] == "Indexed" and job_spec["backoffLimit"] == 0
        assert document["spec"]["failurePolicy"]["maxRestarts"] == django_settings.TRAINING_MAX_RUNS - 1
        # The index-0 pod's name on the JobSet's headless service (named after the JobSet).
        endpoint = f"{name}-{replicated['name']}-0-0.{name}:29400"
    run_dir = output_dir(job) / "ddp"
    for pod in pods:
        container = pod["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == devices
        assert {p["containerPort"] for p in container["ports"]} == {29400}
        args = torchrun_args(container["command"])
        assert (args.nproc_per_node, args.max_restarts, args.module) == (str(devices), 0, True)
        assert args.training_script == "workers.training.distributed" and args.training_script_args == [str(run_dir)]
        if nodes == 1:
            assert args.standalone
        else:
            assert (args.nnodes, args.rdzv_backend, args.rdzv_endpoint) == (str(nodes), "c10d", endpoint)
            assert args.rdzv_id.startswith(f"job-{job.pk}-")
            # Every pod runs one command: torchrun hosts the store where the endpoint is its own address.
            assert args.rdzv_conf == f"join_timeout={round(django_settings.TRAINING_RENDEZVOUS_TIMEOUT_S)}"
    # The run's inputs, where the command reads them, as a gpu worker writes them.
    spec = json.loads((run_dir / SPEC).read_text())
    assert (spec["config"]["nodes"], spec["config"]["devices"]) == (nodes, devices)
    assert spec["config"]["batch_size"] == job.config["batch_size"]  # the global batch stays the job's
    assert spec["model_dir"] == str(local_weights(job.base_model)) and spec["output_dir"] == str(output_dir(job))
    assert len(spec["train_rows"]) == job.dataset_version.rows.filter(split="train").count()
    assert (run_dir / EVENTS).read_text() == ""
    job.refresh_from_db()
    assert job.state == "queued" and job.config["nodes"] == 1  # the row is the job's launch, unchanged


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_the_pods_are_the_gpu_workers_pods_with_the_same_settings_and_volume(queued_job, kind):
    job = queued_job()
    gpu = gpu_worker_pod()
    worker = gpu["containers"][0]
    config = yaml.safe_load((DEPLOY / "k8s" / "config.yaml").read_text())["data"]
    known = known_variables()
    for pod in validate(render(job.pk, "--kind", kind, "--nodes", "2", "--devices", "1")):
        container = pod["containers"][0]
        assert container["image"] == worker["image"] == "workbench-gpu"
        for key in ("securityContext", "nodeSelector", "tolerations", "volumes"):
            assert pod[key] == gpu[key], key
        for key in ("envFrom", "resources", "securityContext", "volumeMounts"):
            assert container[key] == worker[key], key  # the gpu worker's 1 GPU, as this job's --devices 1
        assert {e["name"] for e in container.get("env", [])} <= known
        # The job's folder (ARTIFACT_ROOT, under the data folder unless set) is on the shared volume.
        (data,) = [m for m in container["volumeMounts"] if m["name"] == "data"]
        assert "ARTIFACT_ROOT" not in config and data["mountPath"] == config["WORKBENCH_DATA_DIR"]
        volume = next(v for v in pod["volumes"] if v["name"] == "data")
        assert volume["persistentVolumeClaim"]["claimName"] == "workbench-data"


def test_an_image_is_put_in_as_given(queued_job):
    job = queued_job()
    document = render(job.pk, "--kind", "jobset", "--nodes", "1", "--devices", "1",
                      "--image", "registry.example.com/workbench:gpu")
    (pod,) = validate(document)
    assert pod["containers"][0]["image"] == "registry.example.com/workbench:gpu"


BAD = [
    (["x", "--kind", "jobset", "--nodes", "1", "--devices", "1"], "job: a job id"),
    (["999999", "--kind", "jobset", "--nodes", "1", "--devices", "1"], "job: no fine-tune job 999999"),
    (["{job}", "--kind", "mpijob", "--nodes", "1", "--devices", "1"], "--kind: one of pytorchjob, jobset"),
    (["{job}", "--kind", "<script>alert(1)</script>", "--nodes", "1", "--devices", "1"], "--kind: one of"),
    (["{job}", "--kind", "jobset", "--nodes", "0", "--devices", "1"], "--nodes: a whole number of at least 1"),
    (["{job}", "--kind", "jobset", "--nodes", "1", "--devices", "-2"], "--devices: a whole number of at least 1"),
    (["{job}", "--kind", "jobset", "--nodes", "two", "--devices", "1"], "--nodes: a whole number"),
    (["{job}", "--kind", "jobset", "--nodes", "1.5", "--devices", "1"], "--nodes: a whole number"),
    (["{job}", "--kind", "jobset", "--nodes", "9" * 400, "--devices", "1"], "--nodes: must be at least 1 and at most 8"),
    (["{job}", "--kind", "jobset", "--nodes", "9", "--devices", "1"], "--nodes: must be at least 1 and at most 8"),
    (["{job}", "--kind", "jobset", "--nodes", "2", "--devices", "4"], "--nodes: machines x devices at most"),
    (["{job}", "--kind", "pytorchjob", "--nodes", "1", "--devices", "8"], "--devices: at most the batch size"),
    (["{job}", "--kind", "jobset", "--nodes", "1", "--devices", "1", "--image", "bad image\nkind: Secret"],
     "--image: "),
    (["{job}", "--kind", "jobset", "--nodes", "1", "--devices", "1", "--image", "=HYPERLINK(\"x\")"], "--image: "),
    (["{job}", "--kind", "jobset", "--nodes", "1", "--devices", "1", "--image", "a" * 600], "--image: "),
]


@pytest.mark.parametrize("args, words", BAD)
def test_bad_arguments_are_refused_naming_the_argument_and_nothing_is_written(queued_job, args, words):
    job = queued_job()
    with pytest.raises(CommandError) as caught:
        render(*[a.replace("{job}", str(job.pk)) for a in args])
    assert words in str(caught.value), str(caught.value)
    assert len(str(caught.value)) < 400
    assert not (output_dir(job) / "ddp").exists()
    job.refresh_from_db()
    assert "cluster" not in job.info  # gpu workers still take it


@pytest.mark.parametrize("state, checkpoint, words", [
    ("running", None, "it is running on worker"), ("succeeded", 10, "it already succeeded"),
    ("failed", None, "it failed with no checkpoint"), ("cancelled", None, "it cancelled with no checkpoint"),
    ("failed", 10, "it failed; resume it first (it resumes from its checkpoint at step 10)")])
def test_a_job_that_cannot_run_now_is_refused(queued_job, state, checkpoint, words):
    job = queued_job()
    TrainingJob.objects.filter(pk=job.pk).update(state=state, checkpoint_step=checkpoint, worker="gpu@host-a")
    with pytest.raises(CommandError) as caught:
        render(job.pk, "--kind", "pytorchjob", "--nodes", "2", "--devices", "1")
    assert str(caught.value).startswith(f"job: job {job.pk} cannot be run on the cluster") and words in str(caught.value)
    assert not (output_dir(job) / "ddp").exists()


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_the_relay_comes_with_it_and_gpu_workers_leave_the_job_to_it(queued_job, kind):
    from apps.training.runner import run_job

    job = queued_job()
    training, relay = render_documents(job.pk, "--kind", kind, "--nodes", "2", "--devices", "1")
    name = training["metadata"]["name"]
    assert relay["kind"] == "Job" and relay["metadata"]["name"] == f"{name}-relay"
    try:
        kubernetes_validate.validate(relay, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"relay: {exc.message} at {list(exc.path)}")
    pod = relay["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "manage.py", "training_relay", str(job.pk)]
    workers = yaml.safe_load_all((DEPLOY / "k8s" / "workers.yaml").read_text())
    default = next(d for d in workers if d["metadata"]["name"] == "workbench-worker-default")["spec"]["template"]["spec"]
    for key in ("securityContext", "volumes"):
        assert pod[key] == default[key], key  # the shared volume where the pods write their events
    for key in ("image", "envFrom", "securityContext", "volumeMounts"):
        assert container[key] == default["containers"][0][key], key
    job.refresh_from_db()
    assert job.info["cluster"] == f"{kind}/{name}"
    # A gpu worker given the job's message (sent at launch) leaves it queued for the relay.
    run_job(job.pk, worker="gpu@host-a", pid=1)
    job.refresh_from_db()
    assert (job.state, job.runs, job.worker) == ("queued", 0, "")
    # Nor does it take the job over when its relay's heartbeat is stale (the pods may still train): a
    # relay pod started again does.
    TrainingJob.objects.filter(pk=job.pk).update(state="running", worker="cluster-relay@gone", runs=1,
                                                 heartbeat_at=timezone.now() - timedelta(hours=1))
    run_job(job.pk, worker="gpu@host-a", pid=1)
    job.refresh_from_db()
    assert (job.state, job.runs, job.worker) == ("running", 1, "cluster-relay@gone")


@pytest.mark.django_db(transaction=True)
def test_the_relay_refuses_what_it_cannot_relay_and_fails_a_job_whose_pods_never_speak(queued_job, settings):
    plain = queued_job()
    for args, words in ((["x"], "job: a job id"), (["999999"], "job: no fine-tune job 999999"),
                        ([str(plain.pk)], "is not run by a cluster")):
        with pytest.raises(CommandError, match=words):
            call_command("training_relay", *args, stdout=io.StringIO())
    settings.TRAINING_CLUSTER_SILENCE_S = 1
    job = queued_job()
    render(job.pk, "--kind", "jobset", "--nodes", "2", "--devices", "1")
    out = io.StringIO()
    call_command("training_relay", str(job.pk), stdout=out)  # no pod ever runs: silence
    job.refresh_from_db()
    assert job.state == "failed" and "No event from the training processes for 1 s" in job.error
    assert out.getvalue().startswith(f"job {job.pk} failed: ")
    with pytest.raises(CommandError, match="could not be claimed"):
        call_command("training_relay", str(job.pk), stdout=io.StringIO())


def operator_environment(role: str, index: int, *, nodes: int, devices: int, port: int) -> dict[str, str]:
    """What the training operator (kubeflow.org/v1) sets in a replica's container, here on loopback."""
    node_rank = index if role == "Master" else index + 1
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": str(port), "WORLD_SIZE": str(nodes * devices), "RANK": str(node_rank),
            "PET_NNODES": str(nodes), "PET_NODE_RANK": str(node_rank), "PET_NPROC_PER_NODE": str(devices),
            "PYTHONUNBUFFERED": "1"}


def expand(command: list[str], env: dict[str, str]) -> list[str]:
    """The kubelet's $(VAR) expansion of a container's command."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), part) for part in command]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="2 gloo processes need 2 CPU cores")
def test_the_rendered_replicas_train_the_job_to_its_adapter(queued_job):
    """Each replica's rendered command runs as a process of its own (two pods on one machine), with the
    operator's variables; the job's rank 0 writes its events, checkpoints and adapter in the job's folder,
    and the rendered relay, a process of its own too, ends the job's row with its metrics and adapter."""
    job = queued_job()
    document, relay_job = render_documents(job.pk, "--kind", "pytorchjob", "--nodes", "2", "--devices", "1")
    relay_command = relay_job["spec"]["template"]["spec"]["containers"][0]["command"]
    relay = subprocess.Popen([sys.executable, *relay_command[1:]], cwd=django_settings.BASE_DIR,
                             env={**child_process_env(), "ARTIFACT_ROOT": str(django_settings.ARTIFACT_ROOT)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_the_test_run)
    port = free_port()
    # The image's PATH finds its python; here that of this environment.
    base = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    processes = []
    for role, replica in document["spec"]["pytorchReplicaSpecs"].items():
        for index in range(replica["replicas"]):
            env = operator_environment(role, index, nodes=2, devices=1, port=port)
            command = expand(replica["template"]["spec"]["containers"][0]["command"], env)
            log = open(output_dir(job) / f"{role}-{index}.log", "wb")  # noqa: SIM115 (closed below)
            processes.append((subprocess.Popen(command, env={**base, **env}, cwd=django_settings.BASE_DIR,
                                               stdout=log, stderr=subprocess.STDOUT,
                                               preexec_fn=die_with_the_test_run), log))
    deadline = time.monotonic() + 540
    try:
        while any(p.poll() is None for p, _ in processes) and time.monotonic() < deadline:
            time.sleep(0.5)
        still_running = [p.pid for p, _ in processes if p.poll() is None]
    finally:
        for process, log in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    logs = {path.name: path.read_text()[-3000:] for path in output_dir(job).glob("*.log")}
    # Both replicas ended by themselves. Their exit codes are not the measure: gloo's teardown has
    # aborted a rank after the run's end (the job's outcome below is what the relay reports).
    assert not still_running, logs

    events = [json.loads(line) for line in (output_dir(job) / "ddp" / EVENTS).read_text().splitlines()]
    steps = [e["point"]["step"] for e in events if e["event"] == "step"]
    assert steps == list(range(1, FAST["max_steps"] + 1))
    (start,) = [e for e in events if e["event"] == "start"]
    assert start["info"]["devices"] == 2  # one world of two processes
    result = events[-1]
    assert result["event"] == "result" and result["final_step"] == FAST["max_steps"], events[-3:]
    adapter = Path(result["adapter_dir"])
    assert adapter == output_dir(job) / "adapter" and (adapter / "adapter_config.json").is_file()
    assert any((output_dir(job) / "checkpoints").glob("step-*"))
    # The ranks wrote no more than the product reads: one events file (rank 0), one adapter.
    assert sorted(p.name for p in (output_dir(job) / "ddp").glob("rank-*.pid")) == ["rank-0.pid", "rank-1.pid"]

    try:
        wait_for(lambda: relay.poll() is not None, timeout=120, interval=0.5, what="the relay to end the job")
    finally:
        if relay.poll() is None:
            relay.kill()
    said = relay.stdout.read().decode(errors="replace")
    job.refresh_from_db()
    assert relay.returncode == 0 and job.state == "succeeded", (said, job.error, job.log_tail)
    assert said.strip().endswith(f"job {job.pk} succeeded")
    assert job.worker.startswith("cluster-relay@") and job.current_step == FAST["max_steps"]
    assert job.adapter is not None and job.adapter.status == "ready"
    relayed = MetricPoint.objects.filter(job=job, kind="train").order_by("step").values_list("step", flat=True)
    assert list(relayed) == steps
