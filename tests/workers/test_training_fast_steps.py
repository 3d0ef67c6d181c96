"""Faster steps (issue 21 item 6): the fused loss (fused_loss.py: chunked on any device, Liger on CUDA)
equals the plain loss and its gradients; compiled decoder blocks train the same curve as eager ones;
the options are refused where they cannot run, naming the field. Tiny models, on the CPU (the Liger
test runs in bench/gpu_check.sh)."""

from __future__ import annotations

import pytest

from workers.training import ConfigError, TrainConfig
from workers.training.fused_loss import liger_available, linear_cross_entropy

from .test_training import Recorder, model_dir, run  # noqa: F401 - model_dir is a fixture


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _loss_and_grads(kind: str, hidden, layer, targets):

    hidden = hidden.detach().clone().requires_grad_(True)
    loss = linear_cross_entropy(kind, hidden, layer, targets)
    loss.backward()
    grads = (hidden.grad, layer.weight.grad.clone() if layer.weight.grad is not None else None)
    layer.zero_grad(set_to_none=True)
    return loss.detach(), grads


@pytest.mark.parametrize("trainable_layer", [False, True])
def test_the_chunked_loss_and_its_gradients_equal_the_plain_loss(monkeypatch, trainable_layer):
    """Several chunks (a chunk of 7 tokens over 50), ignored targets, a frozen or trainable layer."""
    import torch

    from workers.training import fused_loss

    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 100, bias=False).requires_grad_(trainable_layer)
    hidden = torch.randn(50, 16)
    targets = torch.randint(0, 100, (50,))
    targets[::5] = -100
    plain, (plain_input, plain_weight) = _loss_and_grads("off", hidden, layer, targets)
    monkeypatch.setattr(fused_loss, "CHUNK_LOGITS", 7 * 100)
    chunked, (chunked_input, chunked_weight) = _loss_and_grads("chunked", hidden, layer, targets)
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked_input, plain_input, rtol=1e-5, atol=1e-6)
    if trainable_layer:
        torch.testing.assert_close(chunked_weight, plain_weight, rtol=1e-5, atol=1e-6)
    else:
        assert chunked_weight is None and plain_weight is None


@pytest.mark.skipif(not cuda_available() or not liger_available(),
                    reason="Liger-kernel needs CUDA and triton (run by bench/gpu_check.sh)")
def test_the_liger_loss_and_its_gradients_equal_the_plain_loss():
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 1000, bias=False, device="cuda").requires_grad_(False)
    hidden = torch.randn(300, 64, device="cuda")
    targets = torch.randint(0, 1000, (300,), device="cuda")
    targets[::3] = -100
    plain, (plain_input, _) = _loss_and_grads("off", hidden, layer, targets)
    liger, (liger_input, _) = _loss_and_grads("liger", hidden, layer, targets)
    torch.testing.assert_close(liger, plain, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(liger_input, plain_input, rtol=1e-3, atol=1e-5)


def test_a_chunked_run_trains_the_plain_curve(model_dir, tmp_path, monkeypatch):  # noqa: F811
    from workers.training import fused_loss

    monkeypatch.setattr(fused_loss, "CHUNK_LOGITS", 5 * 64)  # several chunks of the tiny vocabulary's logits
    options = {"max_steps": 4, "lora_dropout": 0.0, "batch_size": 4}
    plain, chunked = Recorder(), Recorder()
    run(model_dir, tmp_path / "plain", plain, fused_loss="off", **options)
    run(model_dir, tmp_path / "chunked", chunked, fused_loss="chunked", **options)
    assert any("chunked linear cross-entropy" in line for line in chunked.lines)
    assert [p["loss"] for p in chunked.steps] == pytest.approx([p["loss"] for p in plain.steps], rel=1e-5)


def _compiler_works() -> str:
    """Why torch.compile cannot run here ("" when it can): it needs a C compiler for the CPU backend."""
    import torch

    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    except Exception as exc:  # the inductor backend's errors have no common class
        return f"torch.compile does not work on this machine: {type(exc).__name__}: {exc}"[:300]
    return ""


@pytest.mark.timeout(600)
def test_compiled_blocks_train_the_eager_curve_and_evaluate_and_sample(model_dir, tmp_path):  # noqa: F811
    """Packed rows of different lengths (dynamic shapes), an evaluation and greedy samples (eager by
    design) in the compiled run; the loss curve is the eager one."""
    reason = _compiler_works()
    if reason:
        pytest.skip(reason)
    import torch._dynamo

    options = {"max_steps": 4, "lora_dropout": 0.0, "batch_size": 2, "eval_at_start": False,
               "sample_prompts": ["say hello"], "sample_max_new_tokens": 4}
    eager, compiled = Recorder(), Recorder()
    run(model_dir, tmp_path / "eager", eager, eval_rows=FAST_EVAL, **options)
    torch._dynamo.reset()
    result = run(model_dir, tmp_path / "compiled", compiled, eval_rows=FAST_EVAL, compile=True, **options)
    assert [p["loss"] for p in compiled.steps] == pytest.approx([p["loss"] for p in eager.steps], rel=1e-4)
    assert compiled.evals[-1][0]["eval_loss"] == pytest.approx(eager.evals[-1][0]["eval_loss"], rel=1e-4)
    assert compiled.evals[-1][1] == eager.evals[-1][1]
    assert (result.adapter_dir / "adapter_model.safetensors").exists()  # names unchanged by the compile
    assert any("compiled decoder blocks" in line for line in compiled.lines)


FAST_EVAL = [{"prompt": "what is the capital of france ?", "response": "paris"},
             {"prompt": "count", "response": "one two three four five"}]


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"fused_loss": "liger", "device": "cpu"}, "fused_loss", "CUDA"),
    ({"fused_loss": "fused"}, "fused_loss", "one of auto, off, liger, chunked"),
    ({"fused_loss": None}, "fused_loss", "one of"),
    ({"compile": "yes"}, "compile", "true or false"),
    ({"method": "dpo", "fused_loss": "chunked"}, "fused_loss", "dpo"),
])
def test_bad_fast_step_options_are_refused_naming_the_field(options, field, words):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**options).validate()
    assert caught.value.field == field and words in caught.value.message


@pytest.mark.skipif(cuda_available(), reason="this machine has CUDA: device auto trains on it")
def test_liger_where_auto_finds_no_gpu_is_refused_before_anything_is_written(model_dir, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError) as caught:
        run(model_dir, tmp_path / "out", fused_loss="liger", device="auto")
    assert caught.value.field == "fused_loss" and "CUDA" in caught.value.message
    assert not (tmp_path / "out").exists()


def test_auto_is_the_full_logits_on_the_cpu(model_dir, tmp_path):  # noqa: F811
    recorder = Recorder()
    run(model_dir, tmp_path / "out", recorder, max_steps=1, device="cpu")
    assert any("Loss: full logits; eager decoder blocks." in line for line in recorder.lines)
