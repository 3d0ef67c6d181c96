"""A site admin's upload of a base model into the catalogue: safetensors weights with their
config and tokenizer files, or one GGUF file.

The web request checks only what costs nothing (the files' names, kinds and total size) and
writes the files into a folder of their own, all or nothing. Everything that reads them (the
safetensors headers against the file sizes, the GGUF through the `gguf` package, then a real
load) is the worker's (apps.registry.services.run_catalogue_preparation): a header can be made
as large as an attacker likes. Pickle files are refused by name and never opened.
"""

import re
import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from apps.core.errors import Invalid
from workers.models.hf_dir import PICKLE_SUFFIXES

# A plain file name: no folder, no `..`, nothing a shell or a path join would read as more.
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# What a safetensors model needs besides its weights to be loaded (config) and served (tokenizer).
SIDE_FILES = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "chat_template.jinja", "tokenizer.model", "vocab.json", "merges.txt",
              "added_tokens.json", "model.safetensors.index.json"}
MAX_FILES = 64  # a sharded model's weights and its side files


def upload_root() -> Path:
    """Where uploaded catalogue models live (one folder each); a root the worker may read from."""
    return Path(settings.ARTIFACT_ROOT) / "catalogue-uploads"


def is_uploaded(source_path: str) -> bool:
    return Path(source_path).is_relative_to(upload_root())


def check_files(files: list[UploadedFile]) -> str:
    """The model's format ("hf_dir" or "gguf") from the uploaded files' names and sizes; Invalid
    naming `files` otherwise."""
    if not files:
        raise Invalid("Upload the model's files: .safetensors weights with config.json and tokenizer files, "
                      "or one .gguf file.", field="files")
    if len(files) > MAX_FILES:
        raise Invalid(f"At most {MAX_FILES} files make one model.", field="files")
    names = [file.name or "" for file in files]
    for name in names:
        if name.lower().endswith(PICKLE_SUFFIXES):
            raise Invalid(f"{name[:128]} is a pickle checkpoint, which can run code when loaded: upload "
                          "safetensors or GGUF.", field="files")
        if not FILE_NAME.match(name) or ".." in name:
            raise Invalid(f"{name[:128]!r} is not a plain file name (letters, digits, . _ -; no folders).",
                          field="files")
    if len(set(names)) != len(names):
        raise Invalid("Two files have the same name.", field="files")
    total = sum(file.size or 0 for file in files)
    if total > settings.MAX_UPLOAD_BYTES:
        raise Invalid(f"The files make {total:,} bytes; an upload holds at most {settings.MAX_UPLOAD_BYTES:,}.",
                      field="files")
    if any(name.lower().endswith(".gguf") for name in names):
        if len(names) != 1:
            raise Invalid("A GGUF model is one .gguf file, uploaded alone.", field="files")
        return "gguf"
    strangers = [name for name in names if not name.endswith(".safetensors") and name not in SIDE_FILES]
    if strangers:
        raise Invalid(f"{strangers[0][:128]} is not a file of a safetensors model (weights, config.json, "
                      f"tokenizer files: {', '.join(sorted(SIDE_FILES))}).", field="files")
    if not any(name.endswith(".safetensors") for name in names):
        raise Invalid("No .safetensors weights among the files.", field="files")
    if "config.json" not in names:
        raise Invalid("A safetensors model needs its config.json.", field="files")
    return "hf_dir"


def store_files(files: list[UploadedFile], model_format: str) -> Path:
    """Copy the files (in chunks) into a new folder of their own and return the model's path: the
    folder, or the .gguf file in it. Written under a hidden name and renamed when complete; nothing
    is left behind when a copy fails."""
    root = upload_root()
    root.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    incoming = root / f".incoming-{name}"
    incoming.mkdir()
    try:
        for file in files:
            with open(incoming / file.name, "xb") as target:
                for chunk in file.chunks():
                    target.write(chunk)
        folder = incoming.rename(root / name)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    return folder / files[0].name if model_format == "gguf" else folder


def discard(source_path: str) -> None:
    """Remove an uploaded model's folder (its upload failed its checks, or its entry was never made)."""
    path = Path(source_path)
    folder = path if path.is_dir() or path.suffix != ".gguf" else path.parent
    if is_uploaded(str(folder)) and folder != upload_root():
        shutil.rmtree(folder, ignore_errors=True)
