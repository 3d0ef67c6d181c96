"""Read the JSON header of a .safetensors file: tensor names, dtypes and shapes, no tensor data.

Format (https://huggingface.co/docs/safetensors): 8 bytes little-endian header length N, N
bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`,
then the raw data, offsets relative to its start. The header is checked against the file size
so a truncated or corrupted file is refused here, not half-way through a load.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ModelFormatError

# Headers are checked before they are parsed: parsing costs time and about ten times the header's
# size in memory. Real files are far below both caps (a shard of a 671B model: ~1,000 tensors and
# a ~200 KB header); a header listing 10^6 tensors (70 MB) once stalled a web process for 10 s.
MAX_HEADER_BYTES = 16 * 2**20
MAX_TENSORS_PER_FILE = 65_536

DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
# safetensors dtype -> the torch name config.json uses.
DTYPE_NAMES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64", "F8_E4M3": "float8_e4m3fn",
               "F8_E5M2": "float8_e5m2"}


@dataclass(frozen=True)
class SafetensorsSummary:
    tensors: int
    parameters: int                 # sum of the tensors' element counts
    elements_by_dtype: dict[str, int]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # tensor name -> shape


def read_safetensors_header(path: Path) -> SafetensorsSummary:
    """Summarize the header of one .safetensors file. Raises ModelFormatError if it is corrupted."""
    name = path.name
    size = path.stat().st_size
    with path.open("rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise ModelFormatError(f"{name} is not a safetensors file (too short).")
        header_len = int.from_bytes(prefix, "little")
        if 8 + header_len > size:
            raise ModelFormatError(f"{name} is corrupted: its header length does not fit the file.")
        if header_len > MAX_HEADER_BYTES:
            raise ModelFormatError(f"{name} has a {header_len:,}-byte header; at most {MAX_HEADER_BYTES:,} "
                                   "bytes are read.")
        raw = fh.read(header_len)
    if (listed := raw.count(b'"data_offsets"')) > MAX_TENSORS_PER_FILE:
        raise ModelFormatError(f"{name} lists {listed:,} tensors; at most {MAX_TENSORS_PER_FILE:,} per file are read.")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelFormatError(f"{name} is corrupted: its header is not valid JSON.") from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"{name} is corrupted: its header is not a JSON object.")

    data_len = size - 8 - header_len
    parameters = 0
    tensors = 0
    by_dtype: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            continue
        try:
            dtype = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
            if not (isinstance(dtype, str) and isinstance(shape, list)
                    and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
                    and isinstance(begin, int) and isinstance(end, int)):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise ModelFormatError(f"{name} is corrupted: a tensor entry of its header is malformed.") from None
        numel = math.prod(shape)
        if not 0 <= begin <= end <= data_len:
            raise ModelFormatError(f"{name} is corrupted or truncated: tensor data lies past the end of the file.")
        if dtype in DTYPE_BYTES and end - begin != numel * DTYPE_BYTES[dtype]:
            raise ModelFormatError(f"{name} is corrupted: a tensor's byte range does not match its shape and dtype.")
        parameters += numel
        tensors += 1
        by_dtype[dtype] = by_dtype.get(dtype, 0) + numel
        shapes[tensor] = tuple(shape)
    return SafetensorsSummary(tensors=tensors, parameters=parameters, elements_by_dtype=by_dtype, shapes=shapes)
