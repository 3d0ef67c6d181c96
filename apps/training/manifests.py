"""A job across machines as a Kubernetes training job, for clusters that schedule GPUs themselves: a
Kubeflow PyTorchJob or a JobSet (templates in deploy/k8s-training) instead of M gpu workers.

    manifest = render_manifest(job, kind="pytorchjob", nodes=2, devices=8)   # YAML, for kubectl apply -f -

It prepares the job's run folder as a gpu worker does (workers.training.distributed.prepare_run: ddp/spec.json
under the job's output folder, on the volume the pods share) and fills in the template: the name, the
replicas, the GPUs and the container command, which is the gpu workers' own torchrun command
(launch_command) meeting at the cluster's rendezvous endpoint. Each pod's torchrun hosts c10d's store
where the endpoint is its own address (Rendezvous.is_host None), as every pod runs one command.

After the training job comes its relay (relay.yaml: `manage.py training_relay <job>`, runner.run_on_cluster):
one pod that claims the job as a worker would and relays rank 0's ddp/events.jsonl from the shared volume
to the job's row, writes STOP when the job is cancelled and registers the adapter. Rendering marks the job
(info["cluster"]), so that gpu workers leave its queued message to the relay.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml
from django.conf import settings

from apps.training.models import TrainingJob
from apps.training.nodes import new_run_id
from apps.training.runner import engine_arguments, output_dir
from workers.training import ConfigError, TrainCallbacks, TrainConfig
from workers.training.distributed import Rendezvous, launch_command, prepare_run

TEMPLATES = Path(settings.BASE_DIR) / "deploy" / "k8s-training"
KINDS = {"pytorchjob": "pytorchjob.yaml", "jobset": "jobset.yaml"}
RELAY = "relay.yaml"
RENDEZVOUS_PORT = 29400  # the templates' container port (PyTorchJob: MASTER_PORT)
REPLICATED_JOB = "node"  # the JobSet's one replicated job, as named in its template
# An image reference: [registry/]name[:tag][@digest], no spaces or quotes (it goes into the YAML as is).
IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:-]*(@sha256:[0-9a-f]{64})?")
IMAGE_MAX = 512


class ManifestError(Exception):
    """A job or an argument the manifest cannot be made for; `field` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def render_manifest(job: TrainingJob, *, kind: str, nodes: int, devices: int, image: str = "") -> str:
    """The manifest of `kind` running `job` on `nodes` machines x `devices` GPUs, as YAML; writes the job's
    run folder first. `image`: the gpu workers' image (default: the template's name for it, which
    deploy/k8s/kustomization.yaml maps)."""
    if kind not in KINDS:
        raise ManifestError("kind", f"one of {', '.join(KINDS)}, not {kind[:80]!r}.")
    if image and (len(image) > IMAGE_MAX or not IMAGE.fullmatch(image)):
        raise ManifestError("image", f"an image reference such as registry.example.com/workbench:gpu (at most "
                                     f"{IMAGE_MAX} characters), not {image[:80]!r}.")
    _check_queued(job)
    config = _config(job, nodes=nodes, devices=devices)
    name = f"workbench-job-{job.pk}"
    # Marked before its run folder is written: from now on gpu workers leave the job to the relay.
    if not TrainingJob.objects.filter(pk=job.pk, state=TrainingJob.State.QUEUED).update(
            info={**job.info, "cluster": f"{kind}/{name}"}):
        raise ManifestError("job", f"job {job.pk} was taken by a worker meanwhile; it runs there.")
    document = yaml.safe_load((TEMPLATES / KINDS[kind]).read_text())
    document["metadata"]["name"] = name
    document["metadata"]["labels"]["workbench/job"] = str(job.pk)
    endpoint = ("$(MASTER_ADDR):$(MASTER_PORT)" if kind == "pytorchjob"
                else f"{name}-{REPLICATED_JOB}-0-0.{name}:{RENDEZVOUS_PORT}")
    command = cluster_command(job, config, endpoint=endpoint)
    if kind == "pytorchjob":
        document["spec"]["nprocPerNode"] = str(devices)
        replicas = document["spec"]["pytorchReplicaSpecs"]
        if nodes > 1:
            replicas["Worker"]["replicas"] = nodes - 1
            # Its own copy of Master's pod (the template's YAML alias), filled in below and dumped whole.
            replicas["Worker"]["template"] = copy.deepcopy(replicas["Master"]["template"])
        else:
            del replicas["Worker"]
        pods = [replicas[role]["template"] for role in replicas]
    else:
        document["spec"]["failurePolicy"]["maxRestarts"] = max(0, settings.TRAINING_MAX_RUNS - 1)
        job_spec = document["spec"]["replicatedJobs"][0]["template"]["spec"]
        job_spec["parallelism"] = job_spec["completions"] = nodes
        pods = [job_spec["template"]]
    for pod in pods:
        pod["metadata"]["labels"]["workbench/job"] = str(job.pk)
        container = pod["spec"]["containers"][0]
        container["command"] = command
        container["resources"]["limits"]["nvidia.com/gpu"] = devices
        if image:
            container["image"] = image
    relay = yaml.safe_load((TEMPLATES / RELAY).read_text())
    relay["metadata"]["name"] = f"{name}-relay"
    relay["metadata"]["labels"]["workbench/job"] = relay["spec"]["template"]["metadata"]["labels"]["workbench/job"] = \
        str(job.pk)
    relay["spec"]["template"]["spec"]["containers"][0]["command"][-1] = str(job.pk)
    return yaml.safe_dump_all([document, relay], sort_keys=False)


def cluster_command(job: TrainingJob, config: TrainConfig, *, endpoint: str) -> list[str]:
    """The torchrun command of every pod: a gpu worker's (launch_command) over the job's run folder, at
    `endpoint`, with a new run id; the rendezvous waits TRAINING_RENDEZVOUS_TIMEOUT_S for the pods."""
    run_dir = prepare_job_run(job, config)
    rendezvous = Rendezvous(endpoint=endpoint, run_id=new_run_id(job), is_host=None)
    return launch_command(config.devices, run_dir, nodes=config.nodes, rendezvous=rendezvous,
                          join_timeout_s=settings.TRAINING_RENDEZVOUS_TIMEOUT_S, python="python")


def prepare_job_run(job: TrainingJob, config: TrainConfig) -> Path:
    """The job's run folder (ddp/spec.json: config, rows, model and output paths) as a gpu worker writes it."""
    from apps.registry.services import adapter_lineage

    _, arguments = engine_arguments(job, TrainCallbacks(), adapter_lineage(job))
    return prepare_run(config, model_dir=arguments["model_dir"], output_dir=output_dir(job),
                       train_rows=arguments["train_rows"], eval_rows=arguments["eval_rows"],
                       lineage=arguments["lineage"])


def _check_queued(job: TrainingJob) -> None:
    """A queued job: its relay claims it (one that failed or was cancelled after a checkpoint is resumed
    first, which queues it again, and resumes from the checkpoint)."""
    if job.state == TrainingJob.State.QUEUED:
        return
    if job.state == TrainingJob.State.RUNNING:
        reason = f"it is running on worker {job.worker or '?'}"
    elif job.state == TrainingJob.State.SUCCEEDED:
        reason = "it already succeeded"
    elif job.checkpoint_step and job.adapter_id is None:
        reason = f"it {job.state}; resume it first (it resumes from its checkpoint at step {job.checkpoint_step})"
    else:
        reason = f"it {job.state} with no checkpoint to resume from"
    raise ManifestError("job", f"job {job.pk} cannot be run on the cluster: {reason}. Only a queued job can.")


def _config(job: TrainingJob, *, nodes: int, devices: int) -> TrainConfig:
    """The job's config over `nodes` x `devices` processes (the global batch stays the job's)."""
    for field, value in (("nodes", nodes), ("devices", devices)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ManifestError(field, f"a whole number of at least 1, not {value!r}.")
    try:
        config = TrainConfig.from_dict({**job.config, "nodes": nodes, "devices": devices})
        config.validate()
    except ConfigError as exc:
        raise ManifestError(exc.field if exc.field in ("nodes", "devices") else "job",
                            exc.message) from exc
    return config
