"""Data-parallel fine-tunes on one machine: train_distributed() starts torchrun over this module.

    result = train_distributed(config, model_dir=..., output_dir=..., train_rows=..., eval_rows=...,
                               callbacks=MyCallbacks())     # config.devices > 1; same as train() otherwise

The caller's process (a Celery task) writes the run's inputs to output_dir/ddp/spec.json and starts

    python -m torch.distributed.run --standalone --nproc-per-node N --max-restarts 0 \\
        -m workers.training.distributed output_dir/ddp

Each of the N processes (`main` below) joins the process group (NCCL on CUDA, one GPU per process;
gloo on CPU) and runs the engine's own train(): loop.py shards every micro-batch over the ranks
under DistributedDataParallel (see its docstring). Rank 0 alone reports: it appends one JSON object
per line to ddp/events.jsonl (start, step, eval, checkpoint, log, then the outcome), which the
caller's process tails and hands to its TrainCallbacks — so the engine stays free of any database.
Cancelling is a file: when the caller's should_stop() says so, it writes ddp/STOP; every rank looks
for it before each step and the ranks all-reduce the flag, so all stop at the same step (rank 0
checkpoints it).

Every rank writes ddp/rank-N.joined once the process group is up. When not all have joined within
`rendezvous_timeout_s` of torchrun's start (a rank stuck before or in the rendezvous: the others would
wait in it forever), the caller kills torchrun and its ranks and raises RendezvousTimeout, before any
step was trained; it is not restarted (a rendezvous that hung once is a machine problem, not a crash).

A rank that dies ends the whole run: torchrun stops the others and exits, and the caller starts a
fresh torchrun (at most MAX_RESTARTS times), whose ranks resume from the newest complete checkpoint.
(Not torchrun's own --max-restarts: its restarted gloo groups were seen here to connect to the dead
rank 0's address and fail again; a new torchrun has a new rendezvous.) The data position in a checkpoint
counts global batches, so a run also resumes with a different number of processes. Steps trained
after that checkpoint are trained and reported again, with the same step numbers. The torchrun
process dies with the caller (PR_SET_PDEATHSIG), and each rank with torchrun.

Across machines (config.nodes M > 1, `node` a Rendezvous): each of M callers (one gpu worker per machine)
starts its own torchrun with `--nnodes M --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id RUN_ID`;
the node that hosts the endpoint (`is_host`) runs the c10d store, the others connect to it, and c10d
assigns the node ranks (sorted by address and pid: global rank 0 may be on any node). Each caller tails
its own ddp/events.jsonl, so the caller whose node holds global rank 0 relays the events and gets the
result (checkpoints and the adapter are on its machine); the others end with ReportedElsewhere once
their ranks exited cleanly. A node whose ranks have not all joined within `rendezvous_timeout_s` (its
peers never came, torchrun's join_timeout) is killed with RendezvousTimeout, before any step. There is
no restart within the call: a fresh rendezvous needs every node again, so the caller's job is resumed
from its last checkpoint by the caller's own resume path.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, TrainConfig
from .data import TrainingDataError
from .loop import TrainCallbacks, TrainCancelled, TrainResult

RUN_DIR = "ddp"
SPEC = "spec.json"
EVENTS = "events.jsonl"
STOP = "STOP"
LOG = "torchrun.log"
JOINED = "local-{rank}.joined"  # written by each rank (its LOCAL_RANK) once init_process_group returned
ENDED = "local-{rank}.ended"    # written by each rank once it is past the run's last collective, before teardown
RENDEZVOUS_TIMEOUT_S = 300.0  # torch and the process group come up in seconds; a loaded machine takes longer
MAX_RESTARTS = 2          # fresh torchruns after the processes failed (a rank died)
POLL_S = 0.2              # how often the caller reads events and asks should_stop()
# torchrun's agent waits up to 300 s at exit for the other machines' agents (its exit barrier), and for
# nothing when one of them failed in a teardown: once rank 0 has reported, it gets this long, then is stopped.
FINISHED_GRACE_S = 30.0
LOG_TAIL = 4000           # characters of torchrun's output quoted when a run fails without saying why
PR_SET_PDEATHSIG = 1


class DistributedTrainingError(RuntimeError):
    """The processes failed in a way they could not report as one of the engine's errors (a rank killed,
    out of memory, a crash): the message quotes rank 0's error or the end of torchrun's output."""


class RendezvousTimeout(DistributedTrainingError):
    """Not every rank joined the process group in time: torchrun and its ranks were killed, nothing trained."""


class ReportedElsewhere(Exception):
    """Across machines: this node's ranks ended cleanly and global rank 0, on another node, reported the
    run's events and outcome to its own caller."""


@dataclass(frozen=True)
class Rendezvous:
    """Where the M nodes of a job across machines meet (torchrun's c10d rendezvous)."""

    endpoint: str  # HOST:PORT of the c10d store, on the node that hosts it
    run_id: str  # the same on every node of one run; a new run (a resume) takes a new one
    # This node runs the store (the first to claim the job). None: torchrun decides, hosting it where the
    # endpoint's host is this machine (a cluster's pods all run one command: apps.training.manifests).
    is_host: bool | None


def available_devices(device: str = "auto") -> int:
    """How many data-parallel processes this machine can give a job on `device`: its CUDA GPUs (device
    auto or cuda, when CUDA is there), else its CPU cores (gloo)."""
    import torch

    if device in ("auto", "cuda") and torch.cuda.is_available():
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_devices(config: TrainConfig, have: int | None = None) -> None:
    """ConfigError naming `devices` when this machine cannot give config.devices processes. `have`: what
    the caller says it has (a worker's advertised count), else available_devices()."""
    have = available_devices(config.device) if have is None else have
    if config.devices > have:
        import torch

        what = "GPU" if config.device in ("auto", "cuda") and torch.cuda.is_available() else "CPU core"
        raise ConfigError("devices", f"this worker has {have} {what}{'' if have == 1 else 's'}; the job asks for "
                                     f"{config.devices}.")


def launch_command(devices: int, run_dir: Path, *, nodes: int = 1, rendezvous: Rendezvous | None = None,
                   join_timeout_s: float = RENDEZVOUS_TIMEOUT_S, python: str = sys.executable) -> list[str]:
    """The torchrun command line (PyTorch's own launcher: elastic agent, c10d rendezvous): on localhost
    for one machine, at `rendezvous` for `nodes` machines. `python`: the interpreter as the machine that
    runs the command names it (a container's is on its PATH)."""
    if nodes == 1 or rendezvous is None:
        where = ["--standalone"]
    else:
        conf = f"join_timeout={max(1, round(join_timeout_s))}"
        if rendezvous.is_host is not None:
            conf += f",is_host={str(rendezvous.is_host).lower()}"
        where = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous.endpoint,
                 "--rdzv-id", rendezvous.run_id, "--rdzv-conf", conf]
    return [python, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(devices),
            "--max-restarts", "0", "-m", "workers.training.distributed", str(run_dir)]


def prepare_run(config: TrainConfig, *, model_dir: Path, output_dir: Path, train_rows: Sequence[dict],
                eval_rows: Sequence[dict], lineage: dict | None = None, resume_up_to: int | None = None) -> Path:
    """A fresh run folder, output_dir/ddp, holding the run's inputs (spec.json) and an empty events.jsonl;
    returns it. A previous run's events, stop file and pids are removed (its checkpoints are not).
    `resume_up_to`: as train()'s, for every rank (None: resume from the newest checkpoint, as a pod
    restarted by its cluster must)."""
    run_dir = Path(output_dir) / RUN_DIR
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    spec = {"config": config.as_dict(), "model_dir": str(model_dir), "output_dir": str(output_dir),
            "train_rows": list(train_rows), "eval_rows": list(eval_rows), "lineage": lineage,
            "resume_up_to": resume_up_to}
    (run_dir / SPEC).write_text(json.dumps(spec, default=str))
    (run_dir / EVENTS).touch()
    return run_dir


def _set_resume_up_to(run_dir: Path, step: int) -> None:
    spec = json.loads((run_dir / SPEC).read_text())
    spec["resume_up_to"] = step
    (run_dir / SPEC).write_text(json.dumps(spec, default=str))


def train_distributed(config: TrainConfig, *, model_dir: Path, output_dir: Path, train_rows: Sequence[dict],
                      eval_rows: Sequence[dict], callbacks: TrainCallbacks | None = None,
                      lineage: dict | None = None, max_restarts: int = MAX_RESTARTS, devices_here: int | None = None,
                      rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S,
                      rendezvous: Rendezvous | None = None, resume_up_to: int | None = None) -> TrainResult:
    """train() over config.devices processes under torchrun: the same arguments, callbacks (called in
    this process, from rank 0's events), exceptions (ConfigError, TrainingDataError, TrainCancelled,
    FloatingPointError; DistributedTrainingError for a run that failed otherwise, RendezvousTimeout when
    the ranks did not all join within `rendezvous_timeout_s`) and result. `devices_here`: the devices
    this worker has (its advertised count), checked against config.devices (default: counted here).
    config.nodes > 1: this is one node of the run, meeting the others at `rendezvous` (required); raises
    ReportedElsewhere on the nodes without global rank 0, and RendezvousTimeout when the peers did not
    come within `rendezvous_timeout_s`; never restarted here."""
    from .loop import train

    config.validate()
    if config.nodes > 1:
        if rendezvous is None:
            raise ValueError("a run across machines needs its rendezvous")
        max_restarts = 0
    elif config.devices == 1:
        return train(config, model_dir=model_dir, output_dir=output_dir, train_rows=train_rows,
                     eval_rows=eval_rows, callbacks=callbacks, lineage=lineage, resume_up_to=resume_up_to)
    check_devices(config, devices_here)
    callbacks = callbacks or TrainCallbacks()
    run_dir = prepare_run(config, model_dir=model_dir, output_dir=output_dir, train_rows=train_rows,
                          eval_rows=eval_rows, lineage=lineage, resume_up_to=resume_up_to)
    follower = _Follower(run_dir, callbacks, world_size=config.devices, rendezvous_timeout_s=rendezvous_timeout_s,
                         across_machines=config.nodes > 1)
    command = launch_command(config.devices, run_dir, nodes=config.nodes, rendezvous=rendezvous,
                             join_timeout_s=rendezvous_timeout_s)
    for attempt in range(max_restarts + 1):
        with open(run_dir / LOG, "ab") as log:
            process = subprocess.Popen(_dying_with_this_process(command),
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=_environment(config, rendezvous), cwd=_ROOT)
            try:
                outcome = follower.follow(process)
            except RendezvousTimeout:
                _kill(process)
                raise
            finally:
                if process.poll() is None:  # this process is being unwound (an exception in a callback)
                    process.kill()
                    process.wait()
        finished = outcome is not None and outcome["event"] in FINISHED
        ended = finished or (outcome is not None and outcome["event"] != "crash" and process.returncode == 0)
        if finished and follower.cut_short:
            callbacks.log(f"torchrun had not exited {FINISHED_GRACE_S:g} s after rank 0 finished (waiting on "
                          f"another machine's processes); it was stopped, nothing was left undone")
        elif finished and process.returncode != 0:
            callbacks.log(f"a training process failed after rank 0 finished (torchrun exit code "
                          f"{process.returncode}); nothing was left undone")
        if config.nodes > 1 and outcome is None and (process.returncode == 0 or follower.ended_all()):
            if process.returncode != 0:
                callbacks.log(f"a training process failed in its teardown (torchrun exit code {process.returncode}) "
                              f"after this machine's ranks had all ended; nothing was left undone")
            raise ReportedElsewhere("this node's processes ended; global rank 0 ran on another node")
        if ended or follower.stop_sent or attempt == max_restarts:
            break
        callbacks.log(f"the training processes failed (torchrun exit code {process.returncode}); starting them "
                      f"again from the last checkpoint ({attempt + 1} of {max_restarts})")
        if resume_up_to is not None and follower.checkpointed is not None:  # the caller recorded it: resume there
            _set_resume_up_to(run_dir, max(resume_up_to, follower.checkpointed))
    return _result(outcome, process.returncode, run_dir)


def follow_run(run_dir: Path, callbacks: TrainCallbacks, *, silent_after_s: float) -> TrainResult:
    """The result of a run whose processes something else starts and restarts (a cluster's training
    operator, apps.training.manifests) over the run folder `run_dir` (prepare_run's): rank 0's events
    handed to the callbacks as train_distributed hands them, STOP written once should_stop() says so,
    until its outcome. A crash is logged and followed on: the operator may start the processes again,
    and they resume from the checkpoint. Raises as train_distributed does, and DistributedTrainingError
    when no event came for `silent_after_s` (the processes never started, or died with no restart left)."""
    follower = _Follower(run_dir, callbacks)
    last_event, crash = time.monotonic(), ""
    while True:
        outcome, any_event = follower.read()
        if any_event:
            last_event = time.monotonic()
        if outcome is not None and outcome["event"] != "crash":
            return _result(outcome, 0, run_dir)
        if outcome is not None:
            crash = f"; the last failure: {outcome['type']}: {outcome['message']}"
        if time.monotonic() - last_event > silent_after_s:
            raise DistributedTrainingError(f"No event from the training processes for {silent_after_s:g} s: they "
                                           f"did not start, or ended with no restart left{crash}.")
        follower.stop_if_asked()
        time.sleep(POLL_S)


# --- the caller's side -----------------------------------------------------------------------------

_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding the `workers` package


def _environment(config: TrainConfig, rendezvous: Rendezvous | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, env.get("PYTHONPATH")]))
    host = rendezvous.endpoint.rpartition(":")[0].strip("[]") if rendezvous and config.nodes > 1 else "localhost"
    if host in ("localhost", "127.0.0.1", "::1"):  # every rank is on this machine (or nodes on one, in tests)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # CPU ranks share the cores (torchrun would give each one thread only).
    env.setdefault("OMP_NUM_THREADS", str(max(1, available_devices("cpu") // config.devices)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL torchrun; its ranks die with it (PR_SET_PDEATHSIG), so wait for them to be gone too."""
    process.kill()
    process.wait()


def _dying_with_this_process(command: list[str]) -> list[str]:
    """The command, run by a small Python that first asks the kernel to SIGKILL it when this process
    dies (kept across exec), so a killed worker leaves no torchrun training on behind it."""
    bootstrap = ("import ctypes, os, signal, sys; "
                 f"ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL); "
                 f"os.getppid() == {os.getpid()} or sys.exit(1); "
                 "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", bootstrap, *command]


class _Follower:
    """Reads events.jsonl on from where it stopped (the file lasts over every torchrun of the run)."""

    def __init__(self, run_dir: Path, callbacks: TrainCallbacks, *, world_size: int = 1,
                 rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S, across_machines: bool = False) -> None:
        self.run_dir, self.callbacks, self.across_machines = run_dir, callbacks, across_machines
        self.world_size, self.rendezvous_timeout_s = world_size, rendezvous_timeout_s
        self.offset = 0
        self.pending = b""
        self.stop_sent = False
        self.cut_short = False  # torchrun was stopped FINISHED_GRACE_S after rank 0's outcome
        self.checkpointed: int | None = None  # the newest checkpoint the callbacks took without raising

    def follow(self, process: subprocess.Popen) -> dict | None:
        """Hand rank 0's events to the callbacks until torchrun exits; write STOP once should_stop() says
        so. Returns this torchrun's last outcome event (result, cancelled, error, crash), or None. Raises
        RendezvousTimeout when the ranks have not all joined within the timeout of this torchrun's start
        (`world_size`: the processes on this machine), or, across machines, when torchrun gave up waiting
        for its peers before they joined."""
        outcome = None
        for rank in range(self.world_size):  # a restarted torchrun's ranks join again
            (self.run_dir / JOINED.format(rank=rank)).unlink(missing_ok=True)
            (self.run_dir / ENDED.format(rank=rank)).unlink(missing_ok=True)
        joined_by = time.monotonic() + self.rendezvous_timeout_s
        all_joined, finished_at = False, None
        while True:
            exited = process.poll() is not None
            outcome = self.read()[0] or outcome
            if exited and self.across_machines and not all_joined and not self._joined_all():
                raise RendezvousTimeout(self._timeout_message())
            if exited:
                return outcome
            if outcome is not None and outcome["event"] in FINISHED:
                finished_at = finished_at or time.monotonic()
                if time.monotonic() - finished_at > FINISHED_GRACE_S:
                    _kill(process)
                    self.cut_short = True
                    return outcome
            if not all_joined:
                all_joined = self._joined_all()
                if not all_joined and time.monotonic() > joined_by:
                    raise RendezvousTimeout(self._timeout_message())
            self.stop_if_asked()
            time.sleep(POLL_S)

    def read(self) -> tuple[dict | None, bool]:
        """Hand the events written since the last read to the callbacks: (the last outcome among them or
        None, whether there was any event)."""
        with open(self.run_dir / EVENTS, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        self.offset += len(data)
        *lines, self.pending = (self.pending + data).split(b"\n")
        outcome, any_event = None, False
        for line in lines:
            if line.strip():
                any_event = True
                event = json.loads(line)
                outcome = _dispatch(event, self.callbacks) or outcome
                if event["event"] == "checkpoint":  # the callbacks took it without raising
                    self.checkpointed = event["step"]
        return outcome, any_event

    def stop_if_asked(self) -> None:
        if not self.stop_sent and self.callbacks.should_stop():
            (self.run_dir / STOP).write_text("")
            self.stop_sent = True

    def _joined(self) -> int:
        return sum((self.run_dir / JOINED.format(rank=r)).exists() for r in range(self.world_size))

    def _joined_all(self) -> bool:
        return self._joined() == self.world_size

    def ended_all(self) -> bool:
        """Every rank on this machine got past the run's last collective (whatever its exit code says)."""
        return all((self.run_dir / ENDED.format(rank=r)).exists() for r in range(self.world_size))

    def _timeout_message(self) -> str:
        if self.across_machines:
            return (f"This machine did not find its peers within {self.rendezvous_timeout_s:g} s: not every machine "
                    "of the job joined torchrun's rendezvous, so this one stopped before any step was trained.")
        return (f"The training processes did not all join within {self.rendezvous_timeout_s:g} s "
                f"({self._joined()} of {self.world_size} did): torchrun's rendezvous hung, so they were stopped "
                "before any step was trained.")


def _dispatch(event: dict, callbacks: TrainCallbacks) -> dict | None:
    event = dict(event)
    kind = event.pop("event")
    if kind == "start":
        callbacks.on_start(**event)
    elif kind == "step":
        callbacks.on_step(event["point"])
    elif kind == "eval":
        callbacks.on_eval(event["point"], event["samples"])
    elif kind == "checkpoint":
        callbacks.on_checkpoint(**event)
    elif kind == "log":
        callbacks.log(event["message"])
    else:  # an outcome
        if kind == "crash":
            callbacks.log(f"rank 0 failed: {event['type']}: {event['message']}")
        return {"event": kind, **event}
    return None


# Outcomes rank 0 reports only once every rank has passed the run's last collective (the final step, or
# the step they all stopped at): a rank that dies after that, as gloo's teardown has aborted one at exit
# ("terminate called without an active exception"), leaves nothing undone.
FINISHED = ("result", "cancelled")


def _result(outcome: dict | None, returncode: int, run_dir: Path) -> TrainResult:
    kind = outcome["event"] if outcome else None
    if kind == "result":
        return TrainResult(final_step=outcome["final_step"], adapter_dir=Path(outcome["adapter_dir"]),
                           metrics=outcome["metrics"], resumed_from_step=outcome["resumed_from_step"])
    if kind == "cancelled":
        raise TrainCancelled(outcome["step"])
    if kind == "error" and returncode == 0:
        if outcome["type"] == "ConfigError":
            raise ConfigError(outcome["field"], outcome["message"])
        if outcome["type"] == "TrainingDataError":
            raise TrainingDataError(outcome["message"])
        raise FloatingPointError(outcome["message"])
    if kind == "crash":
        raise DistributedTrainingError(f"{outcome['type']} in the training processes: {outcome['message']}")
    tail = (run_dir / LOG).read_bytes()[-LOG_TAIL:].decode(errors="replace") if (run_dir / LOG).exists() else ""
    raise DistributedTrainingError(f"The training processes failed (torchrun exit code {returncode}).\n{tail}")


# --- a rank's side ---------------------------------------------------------------------------------

class _Reporter(TrainCallbacks):
    """Rank 0's callbacks: each call is a line of events.jsonl; stopping is the STOP file."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._events = open(run_dir / EVENTS, "a", encoding="utf-8")  # noqa: SIM115 (the process's lifetime)

    def emit(self, event: str, **fields: Any) -> None:
        self._events.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        self._events.flush()

    def on_start(self, *, total_steps: int, resumed_from_step: int, info: dict) -> None:
        self.emit("start", total_steps=total_steps, resumed_from_step=resumed_from_step, info=info)

    def on_step(self, point: dict) -> None:
        self.emit("step", point=point)

    def on_eval(self, point: dict, samples: list[dict]) -> None:
        self.emit("eval", point=point, samples=samples)

    def on_checkpoint(self, *, step: int, path: str) -> None:
        self.emit("checkpoint", step=step, path=path)

    def should_stop(self) -> bool:
        return (self.run_dir / STOP).exists()

    def log(self, message: str) -> None:
        self.emit("log", message=message)


class _Listener(TrainCallbacks):
    """The other ranks' callbacks: they report nothing, only look for the STOP file."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def should_stop(self) -> bool:
        return (self.run_dir / STOP).exists()


def _die_with_parent() -> None:
    """SIGKILL this rank when torchrun's agent dies (it cannot clean up after a SIGKILL itself)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: torchrun's own clean-up is all there is
        return
    if os.getppid() != parent:
        os._exit(1)


def _share_checkpoint(output_dir: Path, *, up_to: int | None, local_rank: int, device: Any) -> None:
    """Across machines, before training: every machine gets the newest complete checkpoint any rank has
    (sent over the process group from the first rank holding it, as raw bytes, and installed atomically
    by each lacking machine's local rank 0), so that all ranks resume from the same step. Global rank 0
    wrote the checkpoints on its own machine, which need not be rank 0's machine of the next run."""
    import torch
    import torch.distributed as dist

    from .checkpoint import checkpoints_dir_of, complete_steps, install_checkpoint

    checkpoints = checkpoints_dir_of(output_dir)
    steps = complete_steps(checkpoints, up_to)
    mine = torch.tensor([steps[-1] if steps else 0], dtype=torch.int64, device=device)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    newest = [int(t.item()) for t in everyone]
    best = max(newest)
    if best == 0 or all(step == best for step in newest):
        return
    source = newest.index(best)
    header, payload = b"", b""
    if dist.get_rank() == source:
        folder = checkpoints / f"step-{best}"
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        header = json.dumps([[str(p.relative_to(folder)), p.stat().st_size] for p in files]).encode()
        payload = b"".join(p.read_bytes() for p in files)
    sizes = torch.tensor([len(header), len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(sizes, src=source)
    buffers = []
    for size, data in zip(sizes.tolist(), (header, payload)):
        buffer = (torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device) if data
                  else torch.empty(size, dtype=torch.uint8, device=device))
        if size:
            dist.broadcast(buffer, src=source)
        buffers.append(buffer.cpu().numpy().tobytes())
    if mine.item() != best and local_rank == 0:
        def fill(directory: Path) -> None:
            offset = 0
            for name, size in json.loads(buffers[0]):
                target = (directory / name).resolve()
                if directory.resolve() not in target.parents:
                    raise ValueError(f"a checkpoint file outside its folder: {name}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(buffers[1][offset:offset + size])
                offset += size

        install_checkpoint(checkpoints, best, fill)
    dist.barrier()


def main(run_dir: Path) -> int:
    """One rank (torchrun sets RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous)."""
    import torch
    import torch.distributed as dist

    from .loop import train

    _die_with_parent()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    (run_dir / f"rank-{rank}.pid").write_text(str(os.getpid()))
    spec = json.loads((run_dir / SPEC).read_text())
    config = TrainConfig.from_dict(spec["config"])
    cuda = config.device in ("auto", "cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        config.device = "cpu"
        dist.init_process_group("gloo")
    (run_dir / JOINED.format(rank=local_rank)).write_text("")
    if config.nodes > 1:  # each machine has its own output folder: the ranks must resume from one checkpoint
        _share_checkpoint(Path(spec["output_dir"]), up_to=spec.get("resume_up_to"), local_rank=local_rank,
                          device=torch.device("cuda", local_rank) if cuda else torch.device("cpu"))
    reporter = _Reporter(run_dir) if rank == 0 else None
    callbacks = reporter or _Listener(run_dir)
    outcome: dict | None = None
    try:
        result = train(config, model_dir=Path(spec["model_dir"]), output_dir=Path(spec["output_dir"]),
                       train_rows=spec["train_rows"], eval_rows=spec["eval_rows"], callbacks=callbacks,
                       lineage=spec["lineage"], resume_up_to=spec.get("resume_up_to"))
        outcome = {"event": "result", "final_step": result.final_step, "adapter_dir": str(result.adapter_dir),
                   "metrics": result.metrics, "resumed_from_step": result.resumed_from_step}
    except TrainCancelled as exc:  # every rank stops at the same step: nothing to restart
        outcome = {"event": "cancelled", "step": exc.step}
    except (ConfigError, TrainingDataError, FloatingPointError) as exc:  # the same on every rank, and again
        outcome = {"event": "error", "type": type(exc).__name__, "field": getattr(exc, "field", None),
                   "message": getattr(exc, "message", None) or str(exc)}
    except BaseException as exc:  # torchrun ends the other ranks; the caller may start them again
        if reporter:
            reporter.emit("crash", type=type(exc).__name__, message=str(exc)[:2000],
                          traceback=traceback.format_exc()[-8000:])
        raise
    finally:
        if outcome is not None:  # said before the teardown, which gloo has aborted when a peer left first
            (run_dir / ENDED.format(rank=local_rank)).write_text("")
            if reporter:
                reporter.emit(**outcome)
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
