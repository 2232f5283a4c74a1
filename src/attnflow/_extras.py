"""Which extra a missing module belongs to, so a missing extra costs one line, not a traceback.

>>> extra_hint("transformers")
"pip install 'attnflow[hf]'"
>>> extra_hint("numpy") is None
True
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXTRA_OF_MODULE", "MissingExtraError", "extra_hint", "require_modules", "requires_extra"]

# top-level module -> the extra that installs it (pyproject.toml [project.optional-dependencies])
EXTRA_OF_MODULE = {
    "torch": "hf",
    "transformers": "hf",
    "safetensors": "hf",
    "matplotlib": "hf",
    "pandas": "hf",
    "tokenizers": "hf",
    "hydra": "study",
    "omegaconf": "study",
    "pytorch_lightning": "study",
    "lightning": "study",
    "torchmetrics": "study",
    "mlflow": "study",
    "dvc": "study",
    "pyarrow": "study",
    "gguf": "lm",
    "accelerate": "lm",
    "captum": "compare",
    "ferret": "compare",
}


class MissingExtraError(ModuleNotFoundError):
    """A module of an attnflow extra is not installed; the message says which extra to install."""


def extra_hint(module: str | None) -> str | None:
    """The pip command that installs `module`'s extra, or None when it belongs to no extra."""
    extra = EXTRA_OF_MODULE.get((module or "").split(".")[0])
    return None if extra is None else f"pip install 'attnflow[{extra}]'"


@contextmanager
def requires_extra(feature: str) -> Iterator[None]:
    """Turn a ModuleNotFoundError of an extra's module inside the block into a one-line
    MissingExtraError naming `feature`, the module and the extra to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        hint = extra_hint(exc.name)
        if hint is None or isinstance(exc, MissingExtraError):
            raise
        raise MissingExtraError(
            f"{feature} needs {exc.name!r}, which is not installed: {hint}", name=exc.name
        ) from None


def require_modules(feature: str, *modules: str) -> None:
    """Raise MissingExtraError (as `requires_extra`) when one of `modules` cannot be found; nothing
    is imported, so the check costs no import time."""
    from importlib.util import find_spec

    for module in modules:
        if find_spec(module) is None:
            with requires_extra(feature):
                raise ModuleNotFoundError(f"No module named {module!r}", name=module)
