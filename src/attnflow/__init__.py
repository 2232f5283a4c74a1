"""attnflow: attention rollout and attention flow, and the Abnar & Zuidema (2020) study."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["explain_image", "explain_text", "explain_texts", "load", "load_model", "save"]

# Imported on first use: `import attnflow` stays cheap (no torch / transformers until one of these
# is used): name -> (module, attribute). save / load: explanations to / from .json / .safetensors.
_LAZY = {
    name: ("attnflow.hf", name) for name in ("explain_image", "explain_text", "explain_texts", "load_model")
}
_LAZY |= {name: ("attnflow.hf.explanation", name) for name in ("load", "save")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'attnflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
