"""Generating a comparison grid with the real engine on the tiny model: batches through the
micro-batcher, a stop between batches, per-prompt failures, scores and reference perplexity.
Plain Python, no database."""

from pathlib import Path

import pytest

from tests.workers.test_inference import save_tiny_chat_model
from workers.comparison import GridCancelled, GridModel, GridPrompt, run_grid
from workers.comparison.perplexity import reference_perplexity
from workers.inference import Batcher, ModelCache, SamplingParams, generate_batch
from workers.models import load_for_inference

GREEDY = SamplingParams(max_new_tokens=6)
PROMPTS = [GridPrompt(0, "what is the capital of france ?", reference="paris"),
           GridPrompt(1, "what is paris ?", reference="the capital of france"),
           GridPrompt(2, "is paris the capital of france ?"),
           GridPrompt(3, "the capital of what ?", reference="france")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("compare") / "tiny"
    save_tiny_chat_model(directory)
    return directory


@pytest.fixture(scope="module")
def adapter(tiny, tmp_path_factory) -> Path:
    from peft import LoraConfig, get_peft_model

    model, _ = load_for_inference(tiny)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    directory = tmp_path_factory.mktemp("compare-adapter") / "lora"
    peft_model.save_pretrained(directory)
    return directory


@pytest.fixture
def batcher():
    with Batcher(ModelCache(10**9), max_batch_size=32, max_wait_ms=5) as b:
        yield b


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_the_grid_has_every_cell_in_batches_identical_to_generating_alone(tiny, adapter, batcher):
    models = [GridModel(0, "tiny", str(tiny)), GridModel(1, "tiny", str(tiny), adapter_path=str(adapter))]
    batches = []
    run_grid(models, PROMPTS, GREEDY, batcher=batcher, batch_size=3, on_cells=lambda cells: batches.append(cells))
    assert [len(b) for b in batches] == [3, 1, 3, 1]  # model by model, 3 prompts a batch
    assert batcher.batches_run == 4
    cells = {(c.row, c.column): c for b in batches for c in b}
    assert len(cells) == 8 and not any(c.error for c in cells.values())

    model, tokenizer = load_for_inference(tiny)
    from workers.inference import render_prompt

    texts = [render_prompt(tokenizer, messages=[{"role": "user", "content": p.text}]) for p in PROMPTS]
    alone = [generate_batch(model, tokenizer, [t], GREEDY)[0].text for t in texts]
    assert [cells[(p.row, 0)].text for p in PROMPTS] == alone
    assert [cells[(p.row, 1)].text for p in PROMPTS] != alone  # the adapter changes the answers
    for cell in cells.values():
        assert cell.completion_tokens >= 1 and cell.latency_s > 0 and cell.tokens_per_s > 0
    assert set(cells[(0, 0)].scores) == {"exact_match", "rouge_l", "perplexity", "reference_nll", "reference_tokens"}
    assert cells[(2, 0)].scores == {}  # no reference
    assert cells[(1, 0)].scores["reference_tokens"] == 4


def test_a_stop_request_ends_the_run_between_batches_and_done_cells_are_skipped(tiny, batcher):
    models = [GridModel(0, "tiny", str(tiny)), GridModel(1, "tiny-b", str(tiny))]
    seen = []

    def stop_after_first(cells):
        seen.append(cells)
        return True

    with pytest.raises(GridCancelled):
        run_grid(models, PROMPTS, GREEDY, batcher=batcher, batch_size=2, on_cells=stop_after_first)
    assert len(seen) == 1 and [(c.row, c.column) for c in seen[0]] == [(0, 0), (1, 0)]

    rest = []
    run_grid(models, PROMPTS, GREEDY, batcher=batcher, batch_size=8, on_cells=rest.append,
             done={(0, 0), (1, 0)})
    assert sorted((c.row, c.column) for b in rest for c in b) == sorted(
        [(2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)])


def test_a_prompt_too_long_for_the_context_fails_alone(tiny, batcher):
    long_prompt = GridPrompt(1, " ".join(["paris"] * 300))
    cells = []
    run_grid([GridModel(0, "tiny", str(tiny), chat=False)], [PROMPTS[0], long_prompt], GREEDY, batcher=batcher,
             on_cells=cells.extend)
    assert not cells[0].error and cells[0].text is not None
    assert "context" in cells[1].error and cells[1].text == ""


def test_reference_perplexity_is_the_exponent_of_the_mean_reference_token_loss(tiny):
    import math

    import torch

    model, tokenizer = load_for_inference(tiny)
    prompts = ["what is the capital of france ?", "what is paris ?", "the"]
    references = ["paris", "the capital of france", None]
    batched = reference_perplexity(model, tokenizer, prompts, references, rows_per_pass=2)
    assert batched[2] is None
    for prompt, reference, value in zip(prompts[:2], references[:2], batched[:2]):
        context = tokenizer(prompt)["input_ids"]
        answer = tokenizer(reference, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([context + answer])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0].float()
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        nll = -sum(float(logprobs[len(context) - 1 + k, answer[k]]) for k in range(len(answer)))
        assert value["tokens"] == len(answer)
        assert value["nll"] == pytest.approx(nll, rel=1e-4)
        assert value["perplexity"] == pytest.approx(math.exp(nll / len(answer)), rel=1e-4)
