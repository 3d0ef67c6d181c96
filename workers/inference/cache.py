"""An LRU cache of loaded base models under a memory budget, shared by threads; each base carries
the LoRA adapters loaded beside it (adapters.py)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.models import load_for_inference

from .adapters import DEFAULT_ADAPTER_BUDGET_BYTES, AdapterSet, check_adapter_dir
from .precision import check_precision, load_in_precision

__all__ = ["CachedModel", "ModelCache", "check_adapter_dir", "default_dtype", "model_size_bytes", "resolve_device"]


@dataclass
class CachedModel:
    """One base model in the cache: the model, its tokenizer, the adapters loaded beside it."""

    model: Any
    tokenizer: Any
    adapters: AdapterSet
    size_bytes: int  # the base's own parameters and buffers (the adapters count in adapters.total_bytes)


class ModelCache:
    """`get(key, path, ...)` returns (model, tokenizer), loading on a miss; `load(...)` returns the
    CachedModel (with its AdapterSet), which is what the batcher runs.

    Entries are keyed by (key, device, dtype): one copy of each base model in each precision,
    whatever adapters are asked for over it. dtype "int8" is a serving precision (precision.py):
    the model's linear weights quantized to int8; adapters are refused over it. An adapter is
    loaded into its base's AdapterSet with PEFT's multi-adapter loading (the base's weights are
    shared, never copied) and evicted, least recently used first, when the adapters of that base
    weigh more than `adapter_budget_bytes`; an adapter a running row uses is never evicted. When
    the bases (with their adapters) add up to more than
    `memory_budget_bytes`, the least recently used bases are dropped until the rest fits; the
    entry just loaded is never dropped (a single model over the budget stays, alone). Eviction
    only drops the cache's reference: a generation still running on an evicted model keeps it
    alive until it ends.

    The adapter directory must hold adapter_model.safetensors (check_adapter_dir).

    Thread-safe: concurrent gets of the same entry load it once; a load does not block gets of
    other, cached entries. `loader(path, device=..., dtype=...)` defaults to
    workers.models.load_for_inference (bind `roots=` with functools.partial to confine paths).
    """

    def __init__(self, memory_budget_bytes: int, loader: Callable[..., tuple[Any, Any]] = load_for_inference, *,
                 adapter_budget_bytes: int | None = DEFAULT_ADAPTER_BUDGET_BYTES, adapter_kernel: str = "batched"):
        self.memory_budget_bytes = int(memory_budget_bytes)
        self.adapter_budget_bytes = adapter_budget_bytes
        self.adapter_kernel = adapter_kernel  # how rows get their adapter's delta (AdapterSet's kernel)
        self.loader = loader
        self._entries: OrderedDict[tuple, CachedModel] = OrderedDict()
        self._loading: dict[tuple, Future] = {}
        self._lock = threading.Lock()

    def get(self, key: str, path: os.PathLike | str, adapter_path: os.PathLike | str | None = None,
            device: str = "auto", dtype: Any = None) -> tuple[Any, Any]:
        """(model, tokenizer). With `adapter_path`, the model is an AdapterModel: the shared base
        with that adapter on every row (loaded now; a bad adapter raises ModelFormatError before
        the base is loaded)."""
        if adapter_path is not None:
            adapter_path = check_adapter_dir(Path(adapter_path))
            if dtype == "int8":
                check_precision("int8", resolve_device(device), adapter=True)
        entry = self.load(key, path, device=device, dtype=dtype)
        if adapter_path is None:
            return entry.model, entry.tokenizer
        return entry.adapters.view(adapter_path), entry.tokenizer

    def load(self, key: str, path: os.PathLike | str, device: str = "auto", dtype: Any = None) -> CachedModel:
        device = resolve_device(device)
        dtype = default_dtype(device) if dtype is None else dtype
        entry_key = (key, device, str(dtype))
        with self._lock:
            entry = self._entries.get(entry_key)
            if entry is not None:
                self._entries.move_to_end(entry_key)
                return entry
            pending = self._loading.get(entry_key)
            owner = pending is None
            if owner:
                pending = self._loading[entry_key] = Future()
        if not owner:
            return pending.result()  # raises the loader's exception too
        try:
            if dtype == "int8":  # loaded in bf16 (or fp32), then its linear weights quantized (precision.py)
                model, tokenizer = load_in_precision(Path(path), "int8", device=device, loader=self.loader)
            else:
                model, tokenizer = self.loader(Path(path), device=device, dtype=dtype)
            entry = CachedModel(model, tokenizer, AdapterSet(model, budget_bytes=self.adapter_budget_bytes,
                                                          kernel=self.adapter_kernel),
                                model_size_bytes(model))
        except BaseException as exc:
            with self._lock:
                del self._loading[entry_key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._loading[entry_key]
            self._entries[entry_key] = entry
            evicted = self._evict(keep=entry_key)
        pending.set_result(entry)
        if evicted and device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        return entry

    def keys(self) -> list[tuple]:
        """Cached entries' keys, least recently used first."""
        with self._lock:
            return list(self._entries)

    @property
    def total_bytes(self) -> int:
        """The cached bases and the adapters loaded beside them."""
        with self._lock:
            return sum(e.size_bytes + e.adapters.total_bytes for e in self._entries.values())

    def memory(self) -> dict[str, tuple[int, int]]:
        """Per model key (summed over its devices and dtypes): (the base's bytes, the bytes of the
        adapters loaded beside it)."""
        with self._lock:
            entries = [(key[0], entry) for key, entry in self._entries.items()]
        sizes: dict[str, tuple[int, int]] = {}
        for model_key, entry in entries:
            base, adapters = sizes.get(model_key, (0, 0))
            sizes[model_key] = (base + entry.size_bytes, adapters + entry.adapters.total_bytes)
        return sizes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _evict(self, *, keep: tuple) -> list[tuple]:
        evicted = []
        total = sum(e.size_bytes + e.adapters.total_bytes for e in self._entries.values())
        for entry_key in list(self._entries):
            if total <= self.memory_budget_bytes:
                break
            if entry_key == keep:
                continue
            entry = self._entries.pop(entry_key)
            total -= entry.size_bytes + entry.adapters.total_bytes
            evicted.append(entry_key)
        return evicted


def model_size_bytes(model: Any) -> int:
    """Parameter and buffer bytes (each tensor counted once: tied weights are shared)."""
    seen, total = set(), 0
    tensors = list(model.parameters()) + list(model.buffers())
    for tensor in tensors:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor.numel() * tensor.element_size()
    return total


def resolve_device(device: str) -> str:
    """"auto" is cuda when available, then mps, then cpu; anything else is returned as given."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def default_dtype(device: str) -> str:
    """bf16 on a CUDA device that supports it, fp32 everywhere else."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16"
    return "fp32"
