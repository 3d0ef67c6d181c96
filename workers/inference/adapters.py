"""LoRA adapters served beside one base model: one copy of the base in memory, any number of
adapters loaded into it with PEFT's multi-adapter support, each row of a batch run with its own
adapter or none.

    adapters = AdapterSet(base_model, budget_bytes=2**30)
    name = adapters.acquire(adapter_dir)           # loaded on demand (LRU), pinned while in use
    out = adapters.forward([name, None], input_ids=..., attention_mask=..., ...)  # row 0 tuned, row 1 base
    adapters.release(name)                         # unpinned: may now be evicted under the budget

How rows get their own adapter: the first adapter wraps the base in a PeftModel
(`PeftModel.from_pretrained(base, dir, adapter_name=...)`), later ones are added with
`load_adapter(dir, adapter_name=...)`; PEFT injects its LoRA layers into the base's own modules,
so the base's weights are shared, never copied. A forward through the PeftModel with
`adapter_names=[...]` (one per row, "__base__" for none) applies each adapter's delta only to its
own rows (PEFT's mixed-batch inference). LoRA changes the projections, not how attention uses
the key/value cache, so the continuous batch's per-row cache (decode.py) works unchanged; only a
shared prompt prefix is adapter-specific (its keys and values went through the adapter).

Two ways to apply the per-row deltas (`kernel`):
- "batched" (the default): every loaded adapter's A matrices of a layer stacked into one
  [adapters x rank, in] matrix and its B matrices (scaling folded in) into one [out, adapters x
  rank] matrix; per layer, one matmul projects every row onto every adapter's rank space, a per-row
  mask keeps each row's own adapter's columns, a second matmul adds the delta in place: two dense
  matmuls whatever the mix of adapters, no Python loop over adapters (the idea of Punica's and
  S-LoRA's batched LoRA kernels, in plain torch). PEFT's layers are switched off and a forward hook
  on each adds the delta. The stacks are a second copy of the adapters' weights (counted in
  `total_bytes`, so under the budget). Adapters whose layers this cannot express (DoRA,
  fan-in-fan-out weights, LoRA biases, non-Linear layers) make the set use the "peft" way until
  they are evicted. Measured on a quiet 2-core machine (bench/serve_adapters.py, demo model, 16
  rows): 83-91 tokens/s over 8 adapters against PEFT's 58, and faster on one adapter too.
- "peft": PEFT's own mixed batch (`adapter_names=`): for every LoRA layer, a loop over the adapters
  in the batch, each gathering its rows, running its two small matmuls, scattering back. Profiled
  on the demo model with 16 rows over 8 adapters, about 70% of a decoding step's time was in that
  loop (the base's own matmuls about 26%).

Once LoRA layers are injected, a plain forward of the base would apply PEFT's *active* adapter
to every row: so every forward of a served base goes through `forward` here, never the base's
own. Loads, evictions and forwards of one base hold one lock: PEFT's injection and deletion
change modules a forward on another thread (a comparison's perplexity) might be running.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.models.errors import ModelFormatError

BASE = "__base__"  # PEFT's adapter name for "no adapter" in a mixed batch
# LoRA weights of loaded adapters kept beside one base. A rank-16 adapter on every projection of
# the demo model (SmolLM2-135M, fp32) is about 19 MB, twice that with the batched kernel's stacks; 1 GiB
# holds about 25 of them.
DEFAULT_ADAPTER_BUDGET_BYTES = 2**30

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PICKLE_ADAPTER_WEIGHTS = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth")


@dataclass
class _Loaded:
    name: str
    path: str
    size_bytes: int
    pins: int = 0


class AdapterSet:
    """The adapters loaded beside one base model, least recently used first.

    `budget_bytes` bounds what the adapters hold (`total_bytes`: their weights, and with the "batched"
    kernel the stacks' second copy of them; None: no bound). After a load, and whenever
    an adapter is released, the least recently used adapters that no caller holds are deleted
    until the rest fit; a pinned adapter (a running row uses it) is never deleted, so the set may
    stay over budget until its rows finish. Thread-safe.
    """

    def __init__(self, base: Any, *, budget_bytes: int | None = DEFAULT_ADAPTER_BUDGET_BYTES,
                 kernel: str = "batched"):
        if kernel not in ("batched", "peft"):
            raise ValueError('kernel must be "batched" or "peft".')
        self.base = base
        self.budget_bytes = budget_bytes
        self.kernel = kernel
        self._stacks: dict[int, tuple[Any, Any]] = {}  # id(LoRA layer) -> (A stacked, B stacked) or (None, None)
        self._slots: dict[str, int] = {}  # adapter name -> its slot in the stacks
        self._rank = 0  # columns a slot takes: the largest rank loaded
        self._hooked: set[int] = set()
        self._mask: Any = None  # during a forward: [rows, slots x rank], 1 on each row's own adapter's columns
        self.batched = False  # whether the loaded adapters run through the stacks now
        self.peft: Any = None  # the PeftModel around `base`, from the first adapter on
        self.lock = threading.RLock()
        self.loads = 0  # adapters loaded (a reload after eviction counts again)
        self.evictions = 0
        self.weights_bytes = 0  # the loaded adapters' own weights
        self.stack_bytes = 0  # the "batched" kernel's stacks of them
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()  # path -> adapter
        self._by_name: dict[str, _Loaded] = {}
        self._views: dict[str, AdapterModel] = {}

    # --- loading and eviction ----------------------------------------------------------------

    def acquire(self, adapter_path: os.PathLike | str) -> str:
        """Load the adapter at `adapter_path` if it is not loaded, pin it, and return its name
        (what `forward` takes). Each acquire needs one `release`. Raises ModelFormatError for a
        directory that is not a safetensors LoRA adapter, and PEFT's error for one that does not
        fit the base."""
        directory = str(check_adapter_dir(Path(adapter_path)))
        with self.lock:
            adapter = self._loaded.get(directory)
            if adapter is None:
                adapter = self._load(directory)
            self._loaded.move_to_end(directory)
            adapter.pins += 1
            self._evict()
            return adapter.name

    def release(self, name: str) -> None:
        with self.lock:
            adapter = self._by_name.get(name)
            if adapter is not None and adapter.pins > 0:
                adapter.pins -= 1
            self._evict()

    @property
    def total_bytes(self) -> int:
        """What the loaded adapters hold: their weights and the stacks."""
        return self.weights_bytes + self.stack_bytes

    def loaded(self) -> list[str]:
        """The loaded adapters' directories, least recently used first."""
        with self.lock:
            return list(self._loaded)

    def view(self, adapter_path: os.PathLike | str) -> AdapterModel:
        """The base with this adapter on every row, as a model object (loaded now, so a bad
        adapter raises here; reloaded on use if it was evicted meanwhile)."""
        directory = str(check_adapter_dir(Path(adapter_path)))
        self.release(self.acquire(directory))
        with self.lock:
            return self._views.setdefault(directory, AdapterModel(self, directory))

    def _load(self, directory: str) -> _Loaded:
        from peft import PeftModel

        name = "lora_" + hashlib.sha256(directory.encode()).hexdigest()[:16]  # a module name: no dots
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            try:
                if self.peft is None:
                    self.peft = PeftModel.from_pretrained(self.base, directory, adapter_name=name,
                                                          is_trainable=False)
                else:
                    self.peft.load_adapter(directory, adapter_name=name, is_trainable=False)
            except Exception as exc:
                self._forget(name)
                raise ModelFormatError(f"The adapter could not be loaded onto its base model: {exc}") from exc
        # PEFT applies per-row adapters only while its active adapter is a loaded one (which
        # adapter it is does not matter: each row names its own); frozen, in eval mode.
        self.peft.set_adapter(name, inference_mode=True)
        self.peft.eval()  # PEFT refuses per-row adapters in training mode
        marker = f".{name}."
        size = sum(p.numel() * p.element_size() for n, p in self.peft.named_parameters() if marker in n)
        adapter = _Loaded(name, directory, size)
        self._loaded[directory] = self._by_name[name] = adapter
        self.weights_bytes += size
        self.loads += 1
        self._restack()
        return adapter

    def _forget(self, name: str) -> None:
        """Undo what a failed load left: its config and any layer PEFT injected for it."""
        if self.peft is None or name not in self.peft.peft_config:
            return
        try:
            self.peft.delete_adapter(name)
        except Exception:  # nothing injected yet: only the config was added
            self.peft.peft_config.pop(name, None)
        if self._loaded:
            self.peft.set_adapter(next(reversed(self._loaded.values())).name, inference_mode=True)
        self._restack()

    def _evict(self) -> None:
        if self.budget_bytes is None:
            return
        for directory, adapter in list(self._loaded.items()):
            if self.total_bytes <= self.budget_bytes:
                break
            if adapter.pins:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Adapter ... was active which is now deleted"
                self.peft.delete_adapter(adapter.name)
            del self._loaded[directory], self._by_name[adapter.name]
            self.weights_bytes -= adapter.size_bytes
            self.evictions += 1
            if self._loaded:
                self.peft.set_adapter(next(reversed(self._loaded.values())).name, inference_mode=True)
            self._restack()

    def _restack(self) -> None:
        """After a load or an eviction: stack the loaded adapters' weights layer by layer (the
        "batched" kernel), or, where they cannot be, hand the deltas back to PEFT."""
        import torch
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer

        layers = [m for m in self.peft.modules() if isinstance(m, LoraLayer)] if self.peft is not None else []
        names = [adapter.name for adapter in self._loaded.values()]
        batched = self.kernel == "batched" and bool(names) and all(
            type(layer) is LoraLinear and not layer.fan_in_fan_out
            and not any(layer.use_dora.get(n) or getattr(layer, "lora_bias", {}).get(n) for n in names)
            for layer in layers)
        self._stacks, self._slots, self._rank, self.stack_bytes = {}, {}, 0, 0
        for layer in layers:
            layer.enable_adapters(not batched)  # off: the hook adds the deltas instead
        self.batched = batched
        if not batched:
            return
        self._slots = {name: i for i, name in enumerate(names)}
        self._rank = rank = max(layer.r[n] for layer in layers for n in names if n in layer.r)
        for layer in layers:
            if id(layer) not in self._hooked:
                layer.register_forward_hook(self._add_deltas)
                self._hooked.add(id(layer))
            held = [n for n in names if n in layer.lora_A]
            if not held:
                self._stacks[id(layer)] = (None, None)
                continue
            weight = layer.lora_A[held[0]].weight
            a = torch.zeros(len(names) * rank, layer.in_features, dtype=weight.dtype, device=weight.device)
            b = torch.zeros(layer.out_features, len(names) * rank, dtype=weight.dtype, device=weight.device)
            for name in held:
                start, r = self._slots[name] * rank, layer.r[name]
                a[start:start + r] = layer.lora_A[name].weight.detach()
                b[:, start:start + r] = layer.lora_B[name].weight.detach() * layer.scaling[name]
            self._stacks[id(layer)] = (a, b)
            self.stack_bytes += a.nbytes + b.nbytes

    def _add_deltas(self, layer: Any, args: tuple, output: Any) -> Any:
        """Forward hook of a LoRA layer (PEFT's own delta switched off): add each row's adapter's."""
        mask = self._mask
        if mask is None or not self.batched:
            return output
        a, b = self._stacks.get(id(layer), (None, None))
        if a is None:
            return output
        import torch
        import torch.nn.functional as F

        x = args[0].to(a.dtype)
        projected = F.linear(x, a)  # [rows, tokens, slots x rank]: every row on every adapter's A
        projected.mul_(mask.view(mask.shape[0], *([1] * (projected.dim() - 2)), mask.shape[1]))
        if output.dtype == b.dtype and output.is_contiguous() and not torch.is_grad_enabled():
            # added in place: no [rows, tokens, out] delta tensor per layer
            output.view(-1, output.shape[-1]).addmm_(projected.view(-1, projected.shape[-1]), b.t())
            return output
        return output + F.linear(projected, b).to(output.dtype)

    # --- running ---------------------------------------------------------------------------

    def forward(self, names: list[str | None], **kwargs: Any) -> Any:
        """The base's forward with row i run through adapter `names[i]` (None: the base alone).
        Every adapter named must be pinned by the caller (acquire)."""
        with self.lock:
            if not self._loaded:  # never loaded, or all deleted: no LoRA layer has an adapter left
                return self.base(**kwargs)
            if not self.batched:
                return self.peft(**kwargs, adapter_names=[name or BASE for name in names])
            if not any(names):
                return self.base(**kwargs)
            import torch

            a = next(a for a, _ in self._stacks.values() if a is not None)
            mask = torch.zeros(len(names), len(self._slots) * self._rank, dtype=a.dtype, device=a.device)
            for row, name in enumerate(names):
                if name is not None:
                    start = self._slots[name] * self._rank
                    mask[row, start:start + self._rank] = 1
            self._mask = mask
            try:
                return self.base(**kwargs)
            finally:
                self._mask = None


class AdapterModel:
    """The base model with one adapter on every row, standing in for a model object: what
    ModelCache.get returns for an adapter (a comparison's perplexity, generate_batch). Calls go
    through the AdapterSet (the adapter is pinned for the call, reloaded if it was evicted);
    attributes (config, device, parameters ...) are the base's."""

    def __init__(self, adapters: AdapterSet, directory: str):
        self.adapters = adapters
        self.directory = directory

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:  # input_ids given by position
            kwargs["input_ids"], args = args[0], args[1:]
        if args:
            raise TypeError("pass the model's arguments by name")
        rows = next(v for k, v in kwargs.items() if k in ("input_ids", "inputs_embeds") and v is not None).shape[0]
        name = self.adapters.acquire(self.directory)
        try:
            return self.adapters.forward([name] * rows, **kwargs)
        finally:
            self.adapters.release(name)

    forward = __call__

    def get_base_model(self) -> Any:
        return self.adapters.base

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.adapters.base, attribute)


def check_adapter_dir(directory: Path) -> Path:
    """A LoRA adapter directory PEFT may load: adapter_config.json and adapter_model.safetensors.
    A pickle-only adapter (adapter_model.bin) is refused, since PEFT would unpickle it."""
    directory = Path(os.path.realpath(directory))
    if not directory.is_dir():
        raise ModelFormatError("The adapter directory does not exist.")
    if not (directory / ADAPTER_CONFIG).is_file():
        raise ModelFormatError(f"The adapter directory has no {ADAPTER_CONFIG}.")
    weights = directory / ADAPTER_WEIGHTS
    if not weights.is_file():
        if any((directory / name).exists() for name in PICKLE_ADAPTER_WEIGHTS):
            raise ModelFormatError("The adapter's weights are a pickle file; only safetensors adapters are loaded.")
        raise ModelFormatError(f"The adapter directory has no {ADAPTER_WEIGHTS}.")
    if os.path.realpath(weights) != str(weights):
        raise ModelFormatError("The adapter's weights file may not be a link.")
    return directory
