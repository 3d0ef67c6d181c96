"""One model's running batch, for continuous batching: sequences join it at any decoding step
(their prompts prefilled together, then decoded with the others) and leave it as soon as they
finish or are cancelled.

    batch = DecodeBatch(model, tokenizer, max_rows=32, kv_budget_bytes=2 * 2**30)
    batch.admit([Sequence(ids, SamplingParams(max_new_tokens=64), started=time.perf_counter())])
    while batch.rows:
        batch.step()            # one token for every row; finished rows leave the batch
        batch.admit(newcomers)  # whenever new sequences arrive (check batch.fits first)

The key/value cache is transformers' DynamicCache, one row per sequence, laid out left-padded:
every row's newest token is in the last column, so one decoding step appends one column for all
rows. A row's columns are masked where it has no token (the attention mask), and its position
ids count its own tokens only, so under greedy decoding a row generates what it would alone.
A joining group is prefilled as its own small left-padded batch (an admission of mixed lengths
as several groups of similar length, prefill_groups), then its cache rows are
left-padded (or the running rows are) to a common width and concatenated; a leaving row is
dropped with the cache's batch_select_indices, and leading columns no row uses any more are cut.

Why not transformers' own continuous batching (`model.generate_batch`, ContinuousBatchingManager
with its paged cache): it works on this CPU with the demo model (greedy outputs identical), but
measured side by side (bench/README.md, continuous_batching: 8 staggered streaming requests) it
was no faster than this scheduler once warm (tokens/s 23.0 against 25.0, largest TTFT 1.04 s
against 1.06 s), a fresh manager took about 40 s before its first token (it sizes and allocates
its paged cache at start). And it would change what callers rely on: its seed is one per manager
(ContinuousBatchingConfig.seed), not one generator per request, so a seeded request would no
longer sample the same tokens alone and in any batch; sampling settings come from its logits
processors (per-request values are an opt-in, not tried here); it runs a thread per model where
the batcher steps every model of a worker from one; and it was not tried on PEFT adapter models.

Adapters: with an AdapterSet (adapters.py) every forward goes through it, each row with its own
LoRA adapter (Sequence.adapter, a name the AdapterSet gave) or none, so rows of different
adapters of one base share the batch and its steps.

Prefix reuse: when the prompts of a group (or a lone newcomer and the previous prompt) start with
the same tokens, at least MIN_SHARED_PREFIX of them (a chat template's system prompt), those run
once at batch size 1 and are kept: later sequences that start with them copy that cache instead
of running it again. A prefix's keys and values went through an adapter's projections, so it is
shared only by sequences of the same adapter (a group of several adapters runs without one).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .detokenize import IncrementalText
from .params import SamplingParams

MIN_SHARED_PREFIX = 8


@dataclass
class GenerationResult:
    """One sequence's outcome. `finish_reason` is "stop" (an end-of-sequence token or a stop
    sequence), "length" (max_new_tokens reached) or "cancelled". `completion_tokens` counts every
    token the model produced, the end-of-sequence token included (`token_ids` lists them); `text`
    is their decoded text without special tokens, cut before a stop sequence. Times are from when
    the request was made (Sequence.started: the generate_batch call, or Batcher.submit), so they
    include any wait for a place in the batch. `logprobs` (when the request asked for them): one
    {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]} per generated token, the
    end-of-sequence token left out."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    time_to_first_token_s: float
    total_s: float
    token_ids: list[int] = field(default_factory=list, repr=False)
    logprobs: list[dict] | None = field(default=None, repr=False)


@dataclass(eq=False)
class Sequence:
    """One request in a DecodeBatch. `on_token(text_delta)` receives its text as it becomes
    stable (with params.logprobs: `on_token(text_delta, logprobs)`, the entries of the tokens
    since the previous call); `is_cancelled()` is asked after each of its tokens. `result` is set
    when it leaves."""

    prompt_ids: list[int]
    params: SamplingParams
    started: float  # time.perf_counter() when the request was made
    on_token: Callable[[str], None] | None = None
    is_cancelled: Callable[[], bool] | None = None
    generated: list[int] = field(default_factory=list)
    result: GenerationResult | None = None
    text: IncrementalText | None = field(default=None, repr=False)
    generator: Any = field(default=None, repr=False)
    first_token_at: float = 0.0  # seconds from `started` to the first token
    last_token_at: float = 0.0  # time.perf_counter() when its latest token was chosen
    adapter: str | None = None  # the LoRA adapter this row runs through (an AdapterSet name), None: the base
    logprobs: list[dict] = field(default_factory=list, repr=False)  # with params.logprobs: one per token
    logprobs_sent: int = 0  # entries already passed to on_token
    constraint: Any = field(default=None, repr=False)  # with params.json_schema: its grammar's state (constrain.py)


@dataclass
class SharedPrefix:
    """Prompt tokens computed once, with their cache (one (keys, values) pair per layer, batch 1)."""

    ids: tuple[int, ...]
    layers: list[tuple[Any, Any]]
    adapter: str | None = None  # the adapter they ran through


class DecodeBatch:
    """The running batch of one model. Not thread-safe: one thread admits and steps it.

    `max_rows` bounds the sequences in the batch; `kv_budget_bytes` (None: no bound) bounds the
    key/value cache it may grow to: admission (`fits`) counts the padded width every row would
    reach if each ran to its max_new_tokens. `prefix` is a SharedPrefix kept from an earlier
    batch of the same model (see Batcher), `share_prefix=False` turns prefix reuse off.
    `adapters` (an AdapterSet over `model`) runs each row through its own adapter
    (Sequence.adapter); without it every row runs through `model` as it is.
    `group_prefills=False` prefills each admission as one padded group whatever its lengths
    (the benchmark's baseline).
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_rows: int = 32, kv_budget_bytes: int | None = None,
                 share_prefix: bool = True, prefix: SharedPrefix | None = None,
                 last_prompt: list[int] | None = None, last_adapter: str | None = None, adapters: Any = None,
                 group_prefills: bool = True):
        self.model, self.tokenizer = model, tokenizer
        self.group_prefills = group_prefills
        self.adapters = adapters
        self.max_rows = max(1, int(max_rows))
        self.kv_budget_bytes = kv_budget_bytes
        self.share_prefix = share_prefix
        self.prefix = prefix if share_prefix else None
        self.last_prompt = last_prompt if share_prefix else None  # the latest prompt admitted
        self.last_adapter = last_adapter  # ... and its adapter
        self.device = _device_of(model)
        self.eos = eos_token_ids(model, tokenizer)
        self.vocabulary_size = _vocabulary_size(model)
        self.cache_name, self.extra = _forward_arguments(model)
        self.kv_bytes_per_token = kv_bytes_per_token(model)
        self.rows: list[Sequence] = []
        self.cache: Any = None
        self.mask: Any = None  # [rows, width]: 1 where a row has a token, 0 for padding
        self.next_position: Any = None  # [rows, 1]: the position of each row's next token
        self.joinable = True  # False when the model's cache cannot take rows mid-way (not plain layers)
        self.prefills = 0

    # --- what the scheduler asks -------------------------------------------------------------

    @property
    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    @property
    def tokens_in_flight(self) -> int:
        """Prompt and generated tokens of the rows in the batch (what their cache holds)."""
        return sum(len(s.prompt_ids) + len(s.generated) for s in self.rows)

    @property
    def kv_cache_bytes(self) -> int:
        """The cache's size now, padding included (0 when the size per token is unknown)."""
        return len(self.rows) * self.width * (self.kv_bytes_per_token or 0)

    def fits(self, newcomers: list[Sequence]) -> bool:
        """Whether `newcomers` may join now: within max_rows, and within kv_budget_bytes at the
        widest the padded cache can grow while they and the rows already here all run to their
        max_new_tokens. An empty batch takes at least one sequence whatever its size."""
        if not newcomers:
            return True
        if self.rows and not self.joinable:
            return False
        if len(self.rows) + len(newcomers) > self.max_rows:
            return False
        if self.kv_budget_bytes is None or self.kv_bytes_per_token is None or (not self.rows and len(newcomers) == 1):
            return True
        width = max(self.width, max(len(s.prompt_ids) for s in newcomers))
        remaining = max([s.params.max_new_tokens - len(s.generated) for s in self.rows]
                        + [s.params.max_new_tokens for s in newcomers])
        peak = (len(self.rows) + len(newcomers)) * (width + remaining) * self.kv_bytes_per_token
        return peak <= self.kv_budget_bytes

    # --- admission -----------------------------------------------------------------------------

    def admit(self, sequences: list[Sequence]) -> list[Sequence]:
        """Prefill `sequences`, choose each one's first token, and add those not done yet to the
        batch. Returns the sequences that finished at their first token.

        They are prefilled in groups of similar length, shortest first (prefill_groups): one
        left-padded forward over prompts of 38 and 275 tokens computes 275 columns for each, and
        a prefill's cost grows with the columns it computes."""
        if not sequences:
            return []
        import torch

        groups = prefill_groups([len(s.prompt_ids) for s in sequences]) if self.group_prefills else [
            list(range(len(sequences)))]
        finished: list[Sequence] = []
        for group in groups:
            finished += self._prefill([sequences[i] for i in group], torch)
        return finished

    def _prefill(self, sequences: list[Sequence], torch) -> list[Sequence]:
        """One forward over `sequences` (left-padded together) and their first tokens."""
        for seq in sequences:
            seq.text = IncrementalText(self.tokenizer, seq.params.stop)
            seq.generator = _generator(seq.params, self.device, torch)
            if seq.params.json_schema is not None and seq.constraint is None:
                seq.constraint = self.constrain(seq.params.json_schema)
        ids = [seq.prompt_ids for seq in sequences]
        n = len(sequences)
        with torch.inference_mode():
            names = [seq.adapter for seq in sequences]
            shared, cache = self._prefix_cache(ids, names, torch)
            rest = [row[shared:] for row in ids]
            width = max(len(row) for row in rest)
            input_ids = torch.full((n, width), _pad_id(self.tokenizer), dtype=torch.long)
            mask = torch.zeros((n, width), dtype=torch.long)
            for i, row in enumerate(rest):
                input_ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
                mask[i, width - len(row):] = 1
            input_ids, mask = input_ids.to(self.device), mask.to(self.device)
            positions = shared + (mask.cumsum(-1) - 1).clamp(min=0)
            if shared:  # columns: [shared prefix][left padding][rest of the prompt]
                mask = torch.cat([mask.new_ones((n, shared)), mask], dim=-1)
            out = self._forward(names, input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                use_cache=True, **{self.cache_name: cache}, **self.extra)
            cache = getattr(out, self.cache_name)
            self.joinable = self.joinable and _plain_layers(cache)
            tokens = self._choose(out.logits[:, -1, :], sequences, torch)
            self.prefills += 1
            if self.share_prefix:
                self.last_prompt, self.last_adapter = ids[-1], names[-1]
            keep = self._record(sequences, tokens)
            if not keep:
                return list(sequences)
            next_position = mask.sum(-1, keepdim=True)
            if len(keep) < n:
                index = torch.tensor(keep, dtype=torch.long, device=self.device)
                cache = _select_rows(cache, index)
                mask, next_position = mask.index_select(0, index), next_position.index_select(0, index)
            self._join([sequences[i] for i in keep], cache, mask, next_position, torch)
        kept = {id(sequences[i]) for i in keep}
        return [seq for seq in sequences if id(seq) not in kept]

    def constrain(self, schema: dict) -> Any:
        """A Constraint of `schema` over this model's tokens (InferenceInputError for a schema it
        cannot compile)."""
        from .constrain import Constraint

        return Constraint(schema, self.tokenizer, self.vocabulary_size, self.eos)

    def _forward(self, names: list[str | None], **kwargs: Any) -> Any:
        if self.adapters is None:
            return self.model(**kwargs)
        return self.adapters.forward(names, **kwargs)

    def _prefix_cache(self, ids: list[list[int]], names: list[str | None], torch) -> tuple[int, Any]:
        """(length of the prefix these prompts reuse, a cache of it with one row per prompt), or
        (0, None). What the prompts share (with the previous prompt, for a lone one) is computed
        once and kept. The kept prefix is reused as far as every prompt starts with it: whole when it
        covers what they share, else as the start of the new one, whose remaining tokens alone are
        computed (prompts that nest, as a system prompt, then a document, then a question, compute
        each part once)."""
        if not self.share_prefix or (self.rows and not self.joinable) or len(set(names)) > 1:
            return 0, None
        adapter = names[0]
        kept = self.prefix
        shortest = min(len(row) for row in ids) - 1  # each prompt keeps a token of its own
        reuse = 0
        if kept is not None and kept.adapter == adapter:
            reuse = _common_length(kept.ids, ids, shortest)
        alone = len(ids) == 1
        if alone and (self.last_prompt is None or self.last_adapter != adapter):
            candidates = ids
        else:
            candidates = ids if not alone else [ids[0], self.last_prompt]
        common = min(shared_prefix_length(candidates), shortest)
        if reuse >= MIN_SHARED_PREFIX and reuse >= common:
            return reuse, _expanded_cache(_truncated(kept.layers, reuse), len(ids))
        if common < MIN_SHARED_PREFIX:
            return 0, None
        start = reuse if reuse >= MIN_SHARED_PREFIX else 0
        past = _expanded_cache(_truncated(kept.layers, start), 1) if start else None
        prefix = torch.tensor([ids[0][start:common]], dtype=torch.long, device=self.device)
        out = self._forward([adapter], input_ids=prefix, attention_mask=prefix.new_ones((1, common)),
                            position_ids=torch.arange(start, common, device=self.device).unsqueeze(0),
                            use_cache=True, **{self.cache_name: past}, **self.extra)
        cache = getattr(out, self.cache_name)
        if not _plain_layers(cache):
            self.joinable = False
            return 0, None
        self.prefix = SharedPrefix(tuple(ids[0][:common]), [(layer.keys, layer.values) for layer in cache.layers],
                                   adapter)
        return common, _expanded_cache(self.prefix.layers, len(ids))

    def _join(self, newcomers: list[Sequence], cache: Any, mask: Any, next_position: Any, torch) -> None:
        if not self.rows:
            self.rows, self.cache, self.mask, self.next_position = list(newcomers), cache, mask, next_position
            return
        # Both are plain DynamicCaches here (fits refuses newcomers otherwise): pad the narrower
        # one on the left to the other's width, then stack the rows.
        old_width, new_width = self.width, int(mask.shape[1])
        for old, new in zip(self.cache.layers, cache.layers):
            old.keys = torch.cat([_pad_left(old.keys, new_width - old_width, -2, torch),
                                  _pad_left(new.keys, old_width - new_width, -2, torch)])
            old.values = torch.cat([_pad_left(old.values, new_width - old_width, -2, torch),
                                    _pad_left(new.values, old_width - new_width, -2, torch)])
        self.mask = torch.cat([_pad_left(self.mask, new_width - old_width, -1, torch),
                               _pad_left(mask, old_width - new_width, -1, torch)])
        self.next_position = torch.cat([self.next_position, next_position])
        self.rows.extend(newcomers)

    # --- decoding ------------------------------------------------------------------------------

    def step(self) -> list[Sequence]:
        """One token for every row. Returns the sequences that finished (they left the batch)."""
        if not self.rows:
            return []
        import torch

        with torch.inference_mode():
            tokens = torch.tensor([[seq.generated[-1]] for seq in self.rows], dtype=torch.long, device=self.device)
            self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=-1)
            out = self._forward([seq.adapter for seq in self.rows], input_ids=tokens, attention_mask=self.mask,
                                position_ids=self.next_position, use_cache=True, **{self.cache_name: self.cache},
                                **self.extra)
            self.cache = getattr(out, self.cache_name)
            self.next_position = self.next_position + 1
            chosen = self._choose(out.logits[:, -1, :], self.rows, torch)
            keep = self._record(self.rows, chosen)
            finished = [seq for row, seq in enumerate(self.rows) if row not in set(keep)]
            self._keep(keep, torch)
        return finished

    def _keep(self, keep: list[int], torch) -> None:
        """Drop every row not in `keep`, then the leading columns no remaining row uses."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.rows, self.cache, self.mask, self.next_position = [], None, None, None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.cache = _select_rows(self.cache, index)
        self.mask, self.next_position = self.mask.index_select(0, index), self.next_position.index_select(0, index)
        self.rows = [self.rows[row] for row in keep]
        unused = int(self.mask.any(dim=0).int().argmax())  # leading columns that are padding in every row
        if unused and self.joinable:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[..., unused:, :], layer.values[..., unused:, :]
            self.mask = self.mask[:, unused:]

    def _choose(self, logits, sequences: list[Sequence], torch) -> list[int]:
        for row, seq in enumerate(sequences):
            if seq.constraint is not None:  # only what the grammar allows next
                seq.constraint.restrict(logits[row])
        tokens = _choose(logits, [s.params for s in sequences], [s.generator for s in sequences], torch,
                         [s.generated for s in sequences])
        for row, (seq, token) in enumerate(zip(sequences, tokens)):
            if seq.params.logprobs and token not in self.eos:
                seq.logprobs.append(self._logprob_entry(logits[row], token, seq.params.top_logprobs, torch))
            if seq.constraint is not None and token not in self.eos:
                seq.constraint.accept(token)
        return tokens

    def _logprob_entry(self, logits, token: int, top: int, torch) -> dict:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        entry = self._token_entry(token, float(logprobs[token]))
        alternatives = []
        if top:
            values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))
            alternatives = [self._token_entry(int(i), float(v)) for v, i in zip(values.tolist(), ids.tolist())]
        return {**entry, "top_logprobs": alternatives}

    def _token_entry(self, token: int, logprob: float) -> dict:
        text = self.tokenizer.decode([token], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    @staticmethod
    def _stream(seq: Sequence, delta: str, *, final: bool = False) -> None:
        if seq.on_token is None:
            return
        if not seq.params.logprobs:
            if delta:
                seq.on_token(delta)
            return
        fresh = seq.logprobs[seq.logprobs_sent:]
        if delta or (final and fresh):
            seq.logprobs_sent = len(seq.logprobs)
            seq.on_token(delta, fresh)

    def _record(self, sequences: list[Sequence], tokens: list[int]) -> list[int]:
        """Append each sequence's token, stream its text, end the finished ones (their result is
        set). Returns the positions, in `sequences`, of those that go on."""
        now = time.perf_counter()
        keep = []
        for row, (seq, token) in enumerate(zip(sequences, tokens)):
            if not seq.generated:
                seq.first_token_at = now - seq.started
            seq.last_token_at = now
            seq.generated.append(token)
            if token in self.eos:
                reason = "stop"
            else:
                self._stream(seq, seq.text.push(token))
                if seq.text.stopped or (seq.constraint is not None and seq.constraint.complete):
                    reason = "stop"  # a stop sequence, or the JSON value its grammar asked for is whole
                elif len(seq.generated) >= seq.params.max_new_tokens:
                    reason = "length"
                elif seq.is_cancelled is not None and seq.is_cancelled():
                    reason = "cancelled"
                else:
                    keep.append(row)
                    continue
            self._stream(seq, seq.text.finish(), final=True)
            seq.result = GenerationResult(
                text=seq.text.text, prompt_tokens=len(seq.prompt_ids), completion_tokens=len(seq.generated),
                finish_reason=reason, time_to_first_token_s=seq.first_token_at,
                total_s=time.perf_counter() - seq.started, token_ids=seq.generated,
                logprobs=seq.logprobs if seq.params.logprobs else None)
        return keep


# A prefill group takes the next longer prompt while the padding it would then compute stays
# within this share of its real tokens, or within PREFILL_PAD_SLACK columns in all (for short
# prompts one more forward costs more than a little padding).
PREFILL_PAD_WASTE = 0.25
PREFILL_PAD_SLACK = 64


def prefill_groups(lengths: list[int]) -> list[list[int]]:
    """The positions of `lengths` (prompt lengths) in prefill groups: sorted by length, shortest
    first, a new group started where the next prompt would pad the group past
    PREFILL_PAD_WASTE (or PREFILL_PAD_SLACK columns)."""
    groups: list[list[int]] = []
    real = 0
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        length = lengths[index]
        if groups:
            group = groups[-1]
            padded = (len(group) + 1) * length  # the newcomer is the longest so far: the group's width
            if padded - (real + length) <= max(PREFILL_PAD_WASTE * (real + length), PREFILL_PAD_SLACK):
                group.append(index)
                real += length
                continue
        groups.append([index])
        real = length
    return groups


def shared_prefix_length(encoded: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own (its last
    token gives the first logits); 0 for a single prompt or below MIN_SHARED_PREFIX."""
    if len(encoded) < 2:
        return 0
    length = _common_length(encoded[0], encoded[1:], min(len(ids) for ids in encoded) - 1)
    return length if length >= MIN_SHARED_PREFIX else 0


def kv_bytes_per_token(model: Any) -> int | None:
    """Bytes of key/value cache one token takes in every layer, from the model's config (None
    when the config does not say)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if not all(isinstance(v, int) and v > 0 for v in (layers, heads, hidden)):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    element = next(model.parameters()).element_size()
    return 2 * layers * kv_heads * head_dim * element


def _vocabulary_size(model: Any) -> int | None:
    """Entries of the model's logits (its output embedding's rows), None when it does not say."""
    try:
        head = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        head = None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    config = getattr(model, "config", None)
    size = getattr(config, "vocab_size", None)
    return int(size) if isinstance(size, int) else None


def _plain_layers(cache: Any) -> bool:
    """Whether every layer of `cache` is a plain DynamicLayer (full attention, one growing tensor
    per layer): the only kind rows can be padded and stacked in. Sliding-window or quantized
    layers keep their own bookkeeping, so a model with them runs without joining mid-way."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer and layer.is_initialized for layer in layers)


def _common_length(first, rows, limit: int) -> int:
    """How many of `first`'s tokens (at most `limit`) every row starts with."""
    length = min(limit, len(first))
    for row in rows:
        k, bound = 0, min(length, len(row))
        while k < bound and row[k] == first[k]:
            k += 1
        length = k
    return length


def _truncated(layers: list[tuple[Any, Any]], length: int) -> list[tuple[Any, Any]]:
    """The first `length` positions of a prefix's cached (keys, values) per layer (views)."""
    return [(k[:, :, :length], v[:, :, :length]) for k, v in layers]


def _expanded_cache(layers: list[tuple[Any, Any]], rows: int) -> Any:
    """A new DynamicCache holding `layers` (batch 1) copied into `rows` rows."""
    from transformers import DynamicCache

    return DynamicCache([(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in layers])


def _pad_left(tensor, columns: int, dim: int, torch):
    if columns <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _select_rows(cache, index):
    """Keep only the rows `index` of the KV cache."""
    cache.batch_select_indices(index)
    return cache


def _pad_id(tokenizer: Any) -> int:
    for value in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if value is not None:
            return int(value)
    return 0


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokens that end a sequence: the generation config's (what model.generate stops on)
    and the tokenizer's end-of-sequence token."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
            break
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _choose(logits, rows: list[SamplingParams], generators: list, torch,
            history: list[list[int]] | None = None) -> list[int]:
    """Each row's next token: the argmax for a greedy row, a sample otherwise; a row with a
    presence or frequency penalty (and a `history` of generated tokens) chooses from its
    penalized logits. Rows without one are chosen exactly as they were before penalties existed."""
    chosen = logits.argmax(dim=-1).tolist()
    for row, sp in enumerate(rows):
        if sp.penalized and history is not None and history[row]:
            scores = _penalized(logits[row].float(), history[row], sp, torch)
            chosen[row] = int(scores.argmax()) if sp.greedy else _sample(scores, sp, generators[row], torch)
        elif not sp.greedy:
            chosen[row] = _sample(logits[row].float(), sp, generators[row], torch)
    return chosen


def _penalized(scores, generated: list[int], sp: SamplingParams, torch):
    """OpenAI's penalties: logit - count * frequency_penalty - (count > 0) * presence_penalty, where
    count is how often the token was generated so far."""
    vocabulary = scores.shape[-1]
    ids = torch.tensor([t for t in generated if t < vocabulary], dtype=torch.long, device=scores.device)
    counts = torch.bincount(ids, minlength=vocabulary).to(scores.dtype)
    return scores - counts * sp.frequency_penalty - (counts > 0).to(scores.dtype) * sp.presence_penalty


def _sample(logits, sp: SamplingParams, generator, torch) -> int:
    scores = logits / sp.temperature
    if 0 < sp.top_k < scores.shape[-1]:
        kth = torch.topk(scores, sp.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sp.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each one
        drop = before >= sp.top_p  # keep the smallest prefix whose mass reaches top_p (the top token always)
        scores = scores.index_fill(0, order[drop], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _generator(sp: SamplingParams, device, torch):
    if sp.greedy:
        return None
    generator = torch.Generator(device=device)
    if sp.seed is None:
        generator.seed()
    else:
        generator.manual_seed(sp.seed)
    return generator


def _device_of(model: Any):
    device = getattr(model, "device", None)
    if device is not None:
        return device
    return next(model.parameters()).device


def _forward_arguments(model: Any) -> tuple[str, dict]:
    """(name of the KV cache argument, extra arguments) for the model's forward.

    transformers 5.x renamed `past_key_values` to `cache` (the old name still works, with a
    warning, until 5.40). Ask for the last position's logits only when the model supports it,
    not the prompt's whole [batch, length, vocabulary] tensor.
    """
    target = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PeftModel passes kwargs on
    try:
        parameters = inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        parameters = {}
    cache_name = "cache" if "cache" in parameters else "past_key_values"
    if "logits_to_keep" in parameters:
        return cache_name, {"logits_to_keep": 1}
    if "num_logits_to_keep" in parameters:
        return cache_name, {"num_logits_to_keep": 1}
    return cache_name, {}
