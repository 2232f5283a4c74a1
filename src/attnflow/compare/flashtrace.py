"""FlashTrace (Pan et al., ICML 2026; ``pip install --no-deps -r requirements-bench.txt``) on the
same token ids as `attnflow.answer`: `flashtrace_weights` runs ``FlashTrace.trace`` for a span of a
generation and returns its weights over the user's prompt tokens, checked against attnflow's view
of the same prompt (`attnflow.answer.chat.chat_prompt`).

FlashTrace reads each layer's attention probabilities unless it recomputes them
(``recompute_attention=True``): the model runs with eager attention for the call (and gets its own
implementation back after it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["flashtrace_module", "flashtrace_weights", "tracer"]

INSTALL = "pip install --no-deps -r requirements-bench.txt"


def _raising(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a stand-in here (not installed): FlashTrace.trace does not use it")

    return call


class _BlankPipeline:
    """spacy.blank(lang)'s stand-in: a pipeline that takes pipes and splits nothing."""

    def __init__(self) -> None:
        self.pipe_names: list[str] = []

    def add_pipe(self, *args: Any, **kwargs: Any) -> None:
        self.pipe_names = [*self.pipe_names, args[0] if args else "pipe"]

    def __call__(self, text: str) -> Any:
        raise RuntimeError("spacy is a stand-in here: FlashTrace.trace does not split sentences")


def _no_model(name: str) -> Any:
    raise OSError(name)


def flashtrace_module() -> Any:
    """``flashtrace``, importable where its unused imports are absent: its package imports spacy
    (sentence splitting), wordfreq (a word-frequency weight) and seaborn (its plots) at module
    level, none used by ``FlashTrace.trace``; where they are missing (a GPU image, the study's
    install without the comparison libraries), stand-ins that raise on use."""
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("flashtrace") is None:
        raise ImportError(f"FlashTrace is not installed: {INSTALL}")
    if importlib.util.find_spec("wordfreq") is None:
        sys.modules["wordfreq"] = types.SimpleNamespace(zipf_frequency=_raising("wordfreq"))  # type: ignore[assignment]
    if importlib.util.find_spec("seaborn") is None:
        sys.modules["seaborn"] = types.SimpleNamespace(
            heatmap=_raising("seaborn"), set_theme=_raising("seaborn")
        )  # type: ignore[assignment]
    if importlib.util.find_spec("spacy") is None:
        language = types.SimpleNamespace(Language=types.SimpleNamespace(component=lambda name: lambda f: f))
        sys.modules["spacy"] = types.SimpleNamespace(load=_no_model, blank=lambda lang: _BlankPipeline())  # type: ignore[assignment]
        sys.modules["spacy.language"] = language  # type: ignore[assignment]
        sys.modules["spacy.tokens"] = types.SimpleNamespace(Doc=object)  # type: ignore[assignment]
    import flashtrace

    return flashtrace


def tracer(model: Any, tokenizer: Any, *, recompute_attention: bool = False) -> Any:
    """A ``flashtrace.FlashTrace`` in chat mode (the prompt formatted as `chat_prompt` does)."""
    return flashtrace_module().FlashTrace(
        model, tokenizer, use_chat_template=True, recompute_attention=recompute_attention
    )


def flashtrace_weights(
    trace: Any, prompt: str, generated_text: str, span: tuple[int, int], n_user: int
) -> np.ndarray:
    """(n_user,) FlashTrace's weights of the user's prompt tokens for the generated tokens ``span``
    (inclusive; the tokens before it are its ``reasoning_span``)."""
    model = trace.model
    before = model.config._attn_implementation
    model.set_attn_implementation("sdpa" if trace.recompute_attention else "eager")
    try:
        result = trace.trace(
            prompt=prompt, target=generated_text, output_span=tuple(span),
            reasoning_span=(0, span[0] - 1) if span[0] > 0 else None,
        )  # fmt: skip
    finally:
        model.set_attn_implementation(before)
    w = np.asarray(result.scores, dtype=np.float64)
    if w.shape != (n_user,):
        raise RuntimeError(f"FlashTrace scored {w.shape[0]} user tokens where attnflow sees {n_user}")
    return w
