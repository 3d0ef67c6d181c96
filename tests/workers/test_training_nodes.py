"""Fine-tunes across machines (workers/training/distributed.py, config `nodes`): two callers on this
machine stand for two hosts, each with its own output folder, meeting at a loopback c10d rendezvous —
the run follows the one-process curve with the same global batch and seed, exactly one node (the one
c10d gave global rank 0) reports it, the other ends with ReportedElsewhere; a node alone gives up after
the rendezvous timeout with RendezvousTimeout and nothing trained. Plain Python, no database."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.workers.test_training import Recorder
from tests.workers.test_training_ddp import EVAL_ROWS, OPTIONS, TRAIN_ROWS, assert_same_curve, model_dir, reference  # noqa: F401
from workers.training import ConfigError, TrainConfig
from workers.training.checkpoint import latest_checkpoint
from workers.training.distributed import RUN_DIR, Rendezvous, RendezvousTimeout, ReportedElsewhere, train_distributed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="2 gloo processes need 2 CPU cores")


def node(weights: Path, output_dir: Path, rendezvous: Rendezvous, outcome: dict, *, timeout_s: float = 300.0,
         **options) -> None:
    recorder = Recorder()
    outcome["recorder"] = recorder
    config = TrainConfig(**{**OPTIONS, **options, "devices": 1, "nodes": 2})
    try:
        outcome["result"] = train_distributed(config, model_dir=weights, output_dir=output_dir,
                                              train_rows=TRAIN_ROWS, eval_rows=EVAL_ROWS, callbacks=recorder,
                                              rendezvous=rendezvous, rendezvous_timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 (read by the test)
        outcome["error"] = exc


def two_nodes(weights: Path, tmp_path: Path, **options) -> tuple[list[dict], list[dict]]:
    """Both nodes of one run, each in a thread with its own output folder: (the outcomes with a result,
    the others)."""
    endpoint, run_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex
    outcomes = [{}, {}]
    threads = [threading.Thread(target=node, args=(weights, tmp_path / f"host-{i}",
                                                   Rendezvous(endpoint, run_id, is_host=i == 0), outcomes[i]),
                                kwargs=options) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(800)
    return [o for o in outcomes if "result" in o], [o for o in outcomes if "result" not in o]


@two_cores
def test_two_nodes_of_one_process_follow_the_one_process_curve_and_one_node_reports(model_dir, tmp_path,  # noqa: F811
                                                                                      reference):  # noqa: F811
    reporting, others = two_nodes(model_dir, tmp_path, max_steps=40, checkpoint_every=20)
    assert len(reporting) == 1 and len(others) == 1, (reporting, others)
    assert isinstance(others[0].get("error"), ReportedElsewhere), others[0]
    recorder, result = reporting[0]["recorder"], reporting[0]["result"]
    assert [p["step"] for p in recorder.steps] == list(range(1, 41))
    assert_same_curve(recorder.steps, reference, range(1, 41))
    assert recorder.starts[0]["info"]["devices"] == 2 and result.final_step == 40  # the world: 2 processes
    assert (result.adapter_dir / "adapter_model.safetensors").is_file()
    assert not others[0]["recorder"].steps  # the other node relayed nothing and wrote no checkpoint
    here = [tmp_path / f"host-{i}" for i in (0, 1)]
    assert sorted(latest_checkpoint(d / "checkpoints") is not None for d in here) == [False, True]


# Loaded by every Python the run starts (PYTHONPATH): a rank other than global rank 0 aborts at exit, after
# its work, as gloo's teardown has done when the peer node's ranks left first ("terminate called without
# an active exception", SIGABRT).
ABORT_AT_EXIT = """import atexit, os
if os.environ.get("RANK") not in (None, "0"):
    atexit.register(os.abort)
"""


@two_cores
def test_a_rank_aborting_in_its_teardown_after_the_run_leaves_its_node_reported_elsewhere(model_dir, tmp_path,  # noqa: F811
                                                                                         monkeypatch):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(ABORT_AT_EXIT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])))
    reporting, others = two_nodes(model_dir, tmp_path, max_steps=4)
    assert len(reporting) == 1 and reporting[0]["result"].final_step == 4, (reporting, others)
    assert len(others) == 1 and isinstance(others[0].get("error"), ReportedElsewhere), others[0]
    assert any("failed in its teardown" in line for line in others[0]["recorder"].lines), others[0]["recorder"].lines


def test_a_torchrun_still_running_after_rank_0_finished_is_stopped_after_the_grace(tmp_path, monkeypatch):
    """The reporting machine's torchrun can wait minutes at its agent's exit barrier for a peer that
    failed in its teardown: once rank 0's outcome is in, the follower gives it FINISHED_GRACE_S, then
    stops it. A real process stands for that torchrun."""
    import subprocess
    import sys

    from workers.training import distributed
    from workers.training.distributed import EVENTS, _Follower

    monkeypatch.setattr(distributed, "FINISHED_GRACE_S", 1.0)
    run_dir = tmp_path / RUN_DIR
    run_dir.mkdir()
    (run_dir / EVENTS).write_text('{"event": "result", "final_step": 4, "adapter_dir": "a", "metrics": {}, '
                                  '"resumed_from_step": 0}\n')
    lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        follower = _Follower(run_dir, Recorder())
        outcome = follower.follow(lingering)
    finally:
        if lingering.poll() is None:
            lingering.kill()
    assert outcome["event"] == "result" and outcome["final_step"] == 4
    assert follower.cut_short and lingering.wait(timeout=10) == -9  # stopped, not waited for


def test_a_torchrun_exiting_by_itself_after_rank_0_finished_is_not_cut_short(tmp_path, monkeypatch):
    import subprocess
    import sys

    from workers.training import distributed
    from workers.training.distributed import EVENTS, _Follower

    monkeypatch.setattr(distributed, "FINISHED_GRACE_S", 60.0)
    run_dir = tmp_path / RUN_DIR
    run_dir.mkdir()
    (run_dir / EVENTS).write_text('{"event": "cancelled", "step": 3}\n')
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    follower = _Follower(run_dir, Recorder())
    assert follower.follow(quick) == {"event": "cancelled", "step": 3}
    assert not follower.cut_short and quick.returncode == 0


def test_a_node_alone_gives_up_after_the_rendezvous_timeout_with_nothing_trained(model_dir, tmp_path):  # noqa: F811
    outcome: dict = {}
    node(model_dir, tmp_path, Rendezvous(f"127.0.0.1:{free_port()}", uuid.uuid4().hex, is_host=True), outcome,
         timeout_s=15, max_steps=4)
    assert isinstance(outcome.get("error"), RendezvousTimeout), outcome
    assert "did not find its peers within 15 s" in str(outcome["error"])
    assert not outcome["recorder"].starts and not (tmp_path / "checkpoints").exists()
    assert not list((tmp_path / RUN_DIR).glob("rank-*.pid"))  # no rank was started


@pytest.mark.parametrize("options, words", [({"nodes": 0}, "at least 1 and at most 8"), ({"nodes": 9}, "at most 8"),
                                            ({"nodes": "two"}, "whole number"),
                                            ({"nodes": 2, "devices": 2, "batch_size": 2}, "batch size")])
def test_config_refuses_nodes_out_of_range_naming_nodes(options, words):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**options).validate()
    assert caught.value.field == "nodes" and words in caught.value.message
