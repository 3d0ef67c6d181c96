from django.conf import settings
from django.db import models

from apps.core.jobs import ACTIVE_STATES, ENDED_STATES, JobState, LeasedJob


class TrainingJob(LeasedJob):
    """A LoRA fine-tune: its pinned inputs, resolved config, lifecycle and outcome.

    The Celery task gets only the id. A worker claims the job by moving it to RUNNING and then
    keeps `heartbeat_at` fresh; another worker may take it over only once the heartbeat is
    stale (the first worker died), and then resumes from the last checkpoint in `output_dir`.
    """

    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "training.run", "gpu"

    class Method(models.TextChoices):
        SFT = "sft", "Supervised fine-tune (LoRA)"
        DPO = "dpo", "Preference tuning (DPO, LoRA)"
        CLASSIFY = "classify", "Classifier (LoRA and a classification head)"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="training_jobs")
    name = models.CharField(max_length=120)
    method = models.CharField(max_length=16, choices=Method.choices, default=Method.SFT)
    # RESTRICT: a job's inputs cannot be deleted under it, except with the whole project (whose
    # cascade takes the job too; PROTECT would refuse that).
    base_model = models.ForeignKey("registry.RegisteredModel", on_delete=models.RESTRICT, related_name="training_jobs")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.RESTRICT,
                                        related_name="training_jobs")
    train_split = models.CharField(max_length=16, blank=True)  # "" = every row of the version
    eval_split = models.CharField(max_length=16, blank=True)  # "" = no evaluation
    config = models.JSONField()  # workers.training.TrainConfig.as_dict(), every default resolved
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="copies")
    sweep = models.ForeignKey("Sweep", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs")

    class Priority(models.IntegerChoices):
        LOW = 0, "low"
        NORMAL = 1, "normal"
        HIGH = 2, "high"

    priority = models.PositiveSmallIntegerField(choices=Priority.choices, default=Priority.NORMAL)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)  # beside the lease's runs, worker, heartbeat_at

    current_step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(null=True, blank=True)
    checkpoint_step = models.PositiveIntegerField(null=True, blank=True)
    # The claim (`runs` when it was taken) whose bucket folders hold that checkpoint: its fencing token
    # (apps.training.bucket). 0: written before claims tagged them (folders `step-<N>/`).
    checkpoint_run = models.PositiveIntegerField(default=0)
    tokens_trained = models.BigIntegerField(default=0)
    info = models.JSONField(default=dict, blank=True)  # device, dtype, trainable parameters, examples ...
    metrics = models.JSONField(default=dict, blank=True)  # final: train loss, eval loss, best eval loss ...
    log_tail = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    adapter = models.OneToOneField("registry.RegisteredModel", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="produced_by")
    # A job across machines (config `nodes` > 1): where its current run's nodes meet, written by the
    # worker that claimed it (node 0, the c10d store's host), and the run id of that rendezvous.
    rendezvous_endpoint = models.CharField(max_length=300, blank=True)
    rendezvous_id = models.CharField(max_length=64, blank=True)

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        indexes = [models.Index(fields=["project", "state"]), models.Index(fields=["state", "created_at"])]
        constraints = [models.UniqueConstraint(fields=["created_by", "idempotency_key"],
                                               condition=~models.Q(idempotency_key=""),
                                               name="unique_job_idempotency_key")]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def broker_priority(cls, pk: int) -> int:
        """Its launch priority as the broker's: sent with it, and again by a hand-back or the reaper."""
        priority = cls.objects.filter(pk=pk).values_list("priority", flat=True).first()
        return BROKER_PRIORITY.get(priority, BROKER_PRIORITY[cls.Priority.NORMAL])

    @classmethod
    def broker_queue(cls, pk: int) -> str:
        """`gpu` for one device, `gpu.devices-N` for N: only workers with N devices consume it
        (apps.training.capacity)."""
        from apps.training.capacity import job_queue

        config = cls.objects.filter(pk=pk).values_list("config", flat=True).first() or {}
        return job_queue(devices_of(config))

    @property
    def devices(self) -> int:
        return devices_of(self.config)

    @property
    def nodes(self) -> int:
        nodes = (self.config or {}).get("nodes") or 1
        return nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else 1


def devices_of(config: dict) -> int:
    devices = (config or {}).get("devices") or 1
    return devices if isinstance(devices, int) and not isinstance(devices, bool) else 1


# Redis serves kombu's priority steps 0, 3, 6, 9 in that order: high, normal, low.
BROKER_PRIORITY = {TrainingJob.Priority.HIGH: 0, TrainingJob.Priority.NORMAL: 3, TrainingJob.Priority.LOW: 6}


class JobNode(LeasedJob):
    """One of the M-1 further machines of a job across machines (config `nodes`): a slot that one more gpu
    worker claims, under its own lease and heartbeat, to join the run's rendezvous
    (apps.training.nodes). Node 0 is the job's own lease. The slots of a run are written by node 0 with
    the run's `rendezvous_id`; a slot whose run is over (the job ended or started a new run) ends too."""

    State = JobState
    ACTIVE, ENDED = ACTIVE_STATES, ENDED_STATES
    TASK, QUEUE = "training.join", "gpu"

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="node_slots")
    slot = models.PositiveSmallIntegerField()  # 1 .. nodes-1 (the node ranks themselves are c10d's)
    rendezvous_id = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)

    class Meta(LeasedJob.Meta):
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["job", "rendezvous_id", "slot"], name="unique_job_node_slot")]

    @classmethod
    def broker_queue(cls, pk: int) -> str:
        """The queue of its job: only workers with the job's devices per node take a slot."""
        from apps.training.capacity import job_queue

        config = cls.objects.filter(pk=pk).values_list("job__config", flat=True).first() or {}
        return job_queue(devices_of(config))

    @classmethod
    def cancel_asked(cls, pk: int) -> bool:
        """A slot stops when its job was cancelled or its run is over (the job ended, or a new run began)."""
        node = cls.objects.filter(pk=pk).values("rendezvous_id", "job__rendezvous_id", "job__state",
                                                "job__cancel_requested").first()
        return (node is None or node["job__cancel_requested"] or node["job__state"] != JobState.RUNNING
                or node["job__rendezvous_id"] != node["rendezvous_id"])


class Sweep(models.Model):
    """Up to K fine-tunes over a grid or a seeded random sample of some config values (apps.training.sweeps):
    every job shares the base model, the dataset version, the splits, the rest of the config and the
    priority; each is an ordinary TrainingJob (its `sweep` points here), queued, budgeted and cancelled
    as one."""

    class Strategy(models.TextChoices):
        GRID = "grid", "grid (every combination)"
        RANDOM = "random", "seeded random sample"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="sweeps")
    name = models.CharField(max_length=120)
    strategy = models.CharField(max_length=8, choices=Strategy.choices)
    # {option: [values]} for a grid; for random also {option: {"min", "max", "log"}} ranges
    space = models.JSONField()
    seed = models.PositiveIntegerField(default=0)  # of the random sample
    max_jobs = models.PositiveSmallIntegerField()  # K
    base_model = models.ForeignKey("registry.RegisteredModel", on_delete=models.RESTRICT, related_name="sweeps")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.RESTRICT, related_name="sweeps")
    train_split = models.CharField(max_length=16, blank=True)
    eval_split = models.CharField(max_length=16, blank=True)
    base_config = models.JSONField(default=dict, blank=True)  # what every job shares, before its point
    priority = models.PositiveSmallIntegerField(choices=TrainingJob.Priority.choices,
                                                default=TrainingJob.Priority.NORMAL)
    estimated_gpu_hours = models.FloatField(null=True, blank=True)  # of all its jobs, checked at launch
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        default_permissions = ()

    def __str__(self) -> str:
        return self.name


class MetricPoint(models.Model):
    """One reported point of a job: keyed by (job, kind, step), so a resumed job that reports a
    step again replaces it instead of adding a duplicate."""

    class Kind(models.TextChoices):
        TRAIN = "train"
        EVAL = "eval"

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="points")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    step = models.PositiveIntegerField()
    values = models.JSONField()  # train: loss, lr, grad_norm, tokens_per_s ...; eval: eval_loss, perplexity, samples
    recorded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["job", "step", "kind"]
        constraints = [models.UniqueConstraint(fields=["job", "kind", "step"], name="unique_metric_point")]


class SpeedMeasurement(LeasedJob):
    """How fast this installation's training workers ran: recorded by every finished job and by a short
    calibration run when nothing is known yet. Estimates divide a job's work by it
    (workers.training.estimate). A calibration is a job under the lease (apps.core.jobs): claimed by one
    `gpu` worker, kept alive by its heartbeat, re-sent by the reaper when that worker vanishes; a job's
    own record is written ended."""

    TASK, QUEUE = "training.calibrate", "gpu"

    class Kind(models.TextChoices):
        JOB = "job"
        CALIBRATION = "calibration"

    class State(models.TextChoices):
        # The stored values predate the lease and are kept: "pending" is queued, "done" succeeded.
        QUEUED = "pending"  # a calibration queued, not yet run
        RUNNING = "running"
        SUCCEEDED = "done"
        FAILED = "failed"

    ENDED = (State.SUCCEEDED, State.FAILED)

    kind = models.CharField(max_length=16, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.SUCCEEDED)
    base_model = models.ForeignKey("registry.RegisteredModel", null=True, on_delete=models.SET_NULL,
                                   related_name="speed_measurements")
    job = models.OneToOneField(TrainingJob, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="speed_measurement")
    method = models.CharField(max_length=16)
    parameters = models.BigIntegerField(default=0)  # of the base model
    device = models.CharField(max_length=32, blank=True)
    flops_per_s = models.FloatField(null=True, blank=True)  # of the optimizer steps
    seconds_per_step = models.FloatField(null=True, blank=True)
    seconds_per_eval = models.FloatField(null=True, blank=True)
    setup_s = models.FloatField(null=True, blank=True)  # load and tokenize, before the first step
    chars_per_token = models.FloatField(null=True, blank=True)  # of the training text, with its template
    # a calibration: what to run (dataset_version, train_split, eval_split, config)
    request = models.JSONField(default=dict, blank=True)

    class Meta(LeasedJob.Meta):
        default_permissions = ()


class TrainingWorker(models.Model):
    """A `gpu` worker online, with the devices it advertises (apps.training.capacity): written by the
    worker at start and every few seconds, removed at a clean stop; a row not refreshed is a worker gone."""

    hostname = models.CharField(max_length=200, unique=True)  # Celery's node name, as JobRun records it
    devices = models.PositiveIntegerField()
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["hostname"]
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.hostname} ({self.devices} devices)"
