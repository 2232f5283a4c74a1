"""attnflow: attention rollout and attention flow, and the Abnar & Zuidema (2020) study."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["explain_image", "explain_text"]

# Imported on first use: `import attnflow` stays cheap (no torch / transformers).
_LAZY = {"explain_text": "attnflow.hf", "explain_image": "attnflow.hf"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
