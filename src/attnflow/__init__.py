"""attnflow: attention rollout and attention flow, and the Abnar & Zuidema (2020) study."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["explain_image", "explain_text", "explain_texts", "load_model"]

# Imported on first use: `import attnflow` stays cheap (no torch / transformers).
_LAZY = {name: "attnflow.hf" for name in __all__}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
