"""Training methods: one module per method, chosen once by `config.method`.

loop.py is the one skeleton (setup → fit → validate → save: model, LoRA, optimizer, schedule,
gradient accumulation, clipping, evaluation, checkpoints, resume). A method module says only what
differs: which rows it reads, how it tokenizes and batches them, the loss of one micro-batch and
the metrics of a step or an evaluation. Adding ORPO, KTO or a reward model is one new module here
and one line in METHODS; the launch check, the runner and the time estimates ask the module
(`ROWS`, the FLOPs per token) instead of knowing the method.

A method is any object with these names (a module is the usual one; see Method):

    NAME                   the config.method value
    ROWS                   Rows: the formats it takes, the row keys it needs beyond them, in words
    PACKING                whether config.packing applies (examples packed into rows of max_seq_len)
    PERPLEXITY             whether exp(eval_loss) means something (a language-modelling loss)
    TRAIN_FLOPS_PER_TOKEN  x parameters, per token of a training step (forward + backward); estimate.py
    EVAL_FLOPS_PER_TOKEN   x parameters, per token of an evaluation (forward only)
    EXAMPLES               what its training and eval items are called in the run's log
    EARLY_STOPPING         (eval metric, "min" | "max"): what early stopping watches ("loss": eval_loss)
    EVAL_ONLY              summarize's keys that go into eval points only (classify: the confusion matrix)
    check(config)          ConfigError for a setting this method cannot take (from TrainConfig.validate)
    head(model, config)    modules it puts on the base before LoRA, trained fully (PEFT modules_to_save);
                           their names ([] for none)
    prepare(rows, tokenizer, config, *, evaluation) -> (items, DataStats)
    batches(items, config, *, epoch) -> micro-batches: a pure function of (items, seed, epoch); None: in order
    weight(batch)          what a step's loss is the mean over (trained tokens, pairs) in one micro-batch
    tokens(batch)          the micro-batch's non-padding tokens (tokens_seen, tokens_per_s)
    loss(run, batch)       (the micro-batch's loss summed over its weight, a scalar with grad; its detached
                           outputs for summarize)
    summarize(outputs)     {"loss": the mean over the weight of those micro-batches, ...metrics}; the
                           metrics go into every step point (and eval_-prefixed into eval points)

`run` is the loop's run: run.model, run.config, run.device, run.autocast(), run.pad_id and
run.trained_logits_only. Importing this package imports neither torch nor transformers.
"""

from __future__ import annotations

from . import classify, dpo, sft
from .spec import Method, Rows

__all__ = ["METHODS", "Method", "Rows", "get_method"]


METHODS: dict[str, Method] = {sft.NAME: sft, dpo.NAME: dpo, classify.NAME: classify}  # type: ignore[dict-item]  # modules


def get_method(name: str) -> Method:
    """The method called `name`; KeyError for an unknown one (TrainConfig.validate names it first)."""
    return METHODS[name]
