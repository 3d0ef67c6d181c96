"""Data-parallel fine-tunes (workers/training/distributed.py): torchrun with 2 gloo processes on the CPU
against the one-process run with the same global batch and seed — the loss, learning-rate and
grad-norm curves agree (fp32, 1e-3 relative), cancelling stops every rank at one step with a
checkpoint, a run resumes from a checkpoint with the number of processes changed (2 -> 1 and 1 -> 2),
and a rank killed with SIGKILL ends the group (torchrun) and a fresh one resumes from the last
checkpoint. Plain
Python on the tiny Llama of test_training; no database."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.workers.test_training import ROWS, Recorder, save_model, save_tokenizer
from workers.training import ConfigError, TrainCancelled, TrainConfig, train, train_distributed
from workers.training.checkpoint import latest_checkpoint
from workers.training.distributed import RUN_DIR, check_devices

# Each torchrun starts 2 Pythons that import torch and transformers: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# 25 examples unpacked, batches of 4: the last micro-batch of an epoch has one row, so one rank's share
# is empty; two micro-batches a step (no_sync, then the all-reduce); dropout 0: no random masks.
OPTIONS = {"max_seq_len": 32, "batch_size": 4, "grad_accum": 2, "packing": False, "learning_rate": 1e-2,
           "lora_dropout": 0.0, "lora_r": 4, "lora_alpha": 8, "checkpoint_every": 1000, "eval_every": 5,
           "eval_at_start": False}
TRAIN_ROWS = ROWS * 3 + ROWS[:1]
EVAL_ROWS = ROWS[:3]
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("ddp") / "tiny-llama"
    save_model(directory)
    save_tokenizer(directory)
    return directory


def run(model_dir: Path, output_dir: Path, *, devices: int, callbacks: Recorder | None = None,
        resume_up_to: int | None = None, **options):
    config = TrainConfig(**{**OPTIONS, **options, "devices": devices})
    return train_distributed(config, model_dir=model_dir, output_dir=output_dir, train_rows=TRAIN_ROWS,
                             eval_rows=EVAL_ROWS, callbacks=callbacks, resume_up_to=resume_up_to)


@pytest.fixture(scope="module")
def reference(model_dir, tmp_path_factory) -> Recorder:
    """One process (train() in this process), 40 steps: the curve the others must follow."""
    recorder = Recorder()
    run(model_dir, tmp_path_factory.mktemp("one"), devices=1, callbacks=recorder, max_steps=40)
    assert [p["step"] for p in recorder.steps] == list(range(1, 41))
    return recorder


def by_step(points: list[dict]) -> dict[int, dict]:
    """The last point reported for each step (a restarted run reports the steps after its checkpoint again)."""
    return {point["step"]: point for point in points}


def assert_same_curve(points: list[dict], reference: Recorder, steps) -> None:
    expected, got = by_step(reference.steps), by_step(points)
    for step in steps:
        for key in ("loss", "lr", "grad_norm"):
            assert got[step][key] == pytest.approx(expected[step][key], rel=TOLERANCE), (step, key)


def test_two_gloo_processes_follow_the_one_process_curve_and_rank_0_alone_writes(model_dir, tmp_path, reference):
    recorder = Recorder()
    result = run(model_dir, tmp_path, devices=2, callbacks=recorder, max_steps=40, checkpoint_every=20)
    assert [p["step"] for p in recorder.steps] == list(range(1, 41))
    assert_same_curve(recorder.steps, reference, range(1, 41))
    assert [e["step"] for e, _ in recorder.evals] == [e["step"] for e, _ in reference.evals] == [5, 10, 15, 20, 25,
                                                                                                 30, 35, 40]
    for (got, _), (expected, _) in zip(recorder.evals, reference.evals):
        assert got["eval_loss"] == pytest.approx(expected["eval_loss"], rel=TOLERANCE)
    assert recorder.starts[0]["info"]["devices"] == 2 and recorder.starts[0]["total_steps"] == 40
    assert result.final_step == 40 and result.metrics["tokens_trained"] == reference.steps[-1]["tokens_seen"]
    assert (result.adapter_dir / "adapter_model.safetensors").is_file()
    assert [step for step, _ in recorder.checkpoints] == [20, 40]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-20", "step-40"]
    assert {p.name for p in (tmp_path / RUN_DIR).glob("rank-*.pid")} == {"rank-0.pid", "rank-1.pid"}


def test_cancel_stops_every_rank_at_one_step_and_the_run_resumes_on_one_process(model_dir, tmp_path, reference):
    stopper = Recorder(stop_after=3)  # asked by the caller's poll: the ranks stop at their next step
    with pytest.raises(TrainCancelled) as caught:
        run(model_dir, tmp_path, devices=2, callbacks=stopper, max_steps=40)
    stopped = caught.value.step
    assert 3 <= stopped < 40 and stopper.steps[-1]["step"] == stopped
    assert latest_checkpoint(tmp_path / "checkpoints").name == f"step-{stopped}"

    resumed = Recorder()
    result = run(model_dir, tmp_path, devices=1, callbacks=resumed, max_steps=40)
    assert resumed.starts[0]["resumed_from_step"] == stopped and result.final_step == 40
    assert [p["step"] for p in resumed.steps] == list(range(stopped + 1, 41))
    assert_same_curve(resumed.steps, reference, range(stopped + 1, 41))


def test_a_one_process_checkpoint_resumes_on_two_processes_from_the_same_global_position(model_dir, tmp_path,
                                                                                         reference):
    with pytest.raises(TrainCancelled):
        run(model_dir, tmp_path, devices=1, callbacks=Recorder(stop_after=7), max_steps=40)
    resumed = Recorder()
    result = run(model_dir, tmp_path, devices=2, callbacks=resumed, max_steps=40)
    assert resumed.starts[0]["resumed_from_step"] == 7 and result.final_step == 40
    assert [p["step"] for p in resumed.steps] == list(range(8, 41))  # step 8 is the epoch's 2nd, as in one process
    assert_same_curve(resumed.steps, reference, range(8, 41))


class KillRankOne(Recorder):
    """SIGKILLs rank 1 as soon as the first checkpoint is on disk. A thread polls the folder every 5 ms:
    the caller relays events only every POLL_S, by when the ranks may have run on many steps. Keeps the
    checkpoints the first group reported before the second one started."""

    def __init__(self, output_dir: Path) -> None:
        super().__init__()
        self.killed = threading.Event()
        self.first_group_checkpoints: list[int] | None = None
        self.watcher = threading.Thread(target=self._kill_after_first_checkpoint, args=(output_dir,), daemon=True)
        self.watcher.start()

    def _kill_after_first_checkpoint(self, output_dir: Path) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            pid_file = output_dir / RUN_DIR / "rank-1.pid"
            if any((output_dir / "checkpoints").glob("step-*")) and pid_file.exists() and pid_file.read_text():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                self.killed.set()
                return
            time.sleep(0.005)

    def on_start(self, **start):
        if self.starts:
            self.first_group_checkpoints = [step for step, _ in self.checkpoints]
        super().on_start(**start)


# resume_up_to=0 as a job's worker calls it (the row records no checkpoint yet): the fresh group may resume
# from the checkpoints the callbacks took, and from none past them.
@pytest.mark.parametrize("resume_up_to", [None, 0])
def test_a_killed_rank_ends_the_group_and_a_fresh_one_resumes_from_the_last_checkpoint(model_dir, tmp_path,
                                                                                       reference, resume_up_to):
    recorder = KillRankOne(tmp_path)
    result = run(model_dir, tmp_path, devices=2, callbacks=recorder, max_steps=40, checkpoint_every=10,
                 resume_up_to=resume_up_to)
    assert recorder.killed.is_set() and result.final_step == 40
    # Started again once, from the last checkpoint the killed group wrote (which one depends on how far
    # the ranks ran before the signal landed; the first is on disk before the kill).
    assert len(recorder.starts) == 2 and recorder.starts[0]["resumed_from_step"] == 0
    resumed_from = recorder.starts[1]["resumed_from_step"]
    assert resumed_from == recorder.first_group_checkpoints[-1] and 10 <= resumed_from < 40
    assert any("starting them again from the last checkpoint (1 of 2)" in line for line in recorder.lines)
    assert sorted(by_step(recorder.steps)) == list(range(1, 41))
    assert_same_curve(recorder.steps, reference, range(1, 41))


@pytest.mark.parametrize("options, words", [
    ({"devices": 0}, "at least 1"),
    ({"devices": 2, "device": "cuda:1"}, "cuda:1"),
    ({"devices": 2, "device": "mps"}, "mps"),
    ({"devices": 5, "batch_size": 4}, "batch size"),
])
def test_config_refuses_devices_it_cannot_run_naming_devices(options, words):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**options).validate()
    assert caught.value.field == "devices" and words in caught.value.message


def test_more_devices_than_the_machine_has_is_refused_naming_devices(model_dir, tmp_path):
    config = TrainConfig(devices=4096, batch_size=4096, device="cpu")
    with pytest.raises(ConfigError) as caught:
        check_devices(config)
    assert caught.value.field == "devices" and "CPU cores" in caught.value.message
    with pytest.raises(ConfigError):
        train_distributed(config, model_dir=model_dir, output_dir=tmp_path, train_rows=TRAIN_ROWS, eval_rows=[])
    assert not (tmp_path / RUN_DIR).exists()  # refused before anything was started


def test_train_still_runs_one_process_in_place(model_dir, tmp_path):
    result = train(TrainConfig(**{**OPTIONS, "max_steps": 2}), model_dir=model_dir, output_dir=tmp_path,
                   train_rows=TRAIN_ROWS, eval_rows=[])
    assert result.final_step == 2 and not (tmp_path / RUN_DIR).exists()


def test_preference_tuning_runs_data_parallel_on_the_same_curve(model_dir, tmp_path):
    """DPO's reference pass (the adapter disabled) runs inside DDP's forward; the reward metrics are
    gathered from every rank."""
    from tests.workers.test_training_dpo import DPO, PAIRS

    options = {**DPO, "batch_size": 4, "max_steps": 6, "lora_dropout": 0.0, "eval_at_start": False,
               "checkpoint_every": 1000}
    curves = []
    for devices in (1, 2):
        recorder = Recorder()
        train_distributed(TrainConfig(**options, devices=devices), model_dir=model_dir,
                          output_dir=tmp_path / str(devices), train_rows=PAIRS, eval_rows=[], callbacks=recorder)
        curves.append(recorder.steps)
    one, two = curves
    assert [p["step"] for p in two] == list(range(1, 7))
    for a, b in zip(one, two):
        for key in ("loss", "reward_margin", "reward_accuracy", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=TOLERANCE, abs=1e-6), (a["step"], key)


def test_a_run_started_by_someone_else_is_followed_and_stopped_through_its_folder(model_dir, tmp_path):
    """follow_run, what a cluster's relay does while the training operator runs the processes (here
    torchrun started by the test): rank 0's events reach the callbacks, and a stop asked for is the STOP
    file every rank reads."""
    import subprocess
    import sys

    from workers.training.distributed import ENDED, STOP, follow_run, launch_command, prepare_run

    config = TrainConfig(**{**OPTIONS, "devices": 2, "max_steps": 40})
    run_dir = prepare_run(config, model_dir=model_dir, output_dir=tmp_path, train_rows=TRAIN_ROWS,
                          eval_rows=EVAL_ROWS)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    process = subprocess.Popen(launch_command(2, run_dir, python=sys.executable), env=env, cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    stopper = Recorder(stop_after=3)
    try:
        with pytest.raises(TrainCancelled) as caught:
            follow_run(run_dir, stopper, silent_after_s=600)
        process.wait(timeout=120)
        # every rank stopped past the run's last collective (torchrun's exit code is not the measure:
        # gloo's teardown has aborted a rank after that, and the cancel was already complete)
        assert all((run_dir / ENDED.format(rank=rank)).exists() for rank in (0, 1))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (run_dir / STOP).exists()
    assert stopper.starts[0]["info"]["devices"] == 2
    assert 3 <= caught.value.step < 40 and stopper.steps[-1]["step"] == caught.value.step
    assert latest_checkpoint(tmp_path / "checkpoints").name == f"step-{caught.value.step}"
