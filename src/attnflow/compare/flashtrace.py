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

__all__ = ["flashtrace_weights", "tracer"]


def tracer(model: Any, tokenizer: Any, *, recompute_attention: bool = False) -> Any:
    """A ``flashtrace.FlashTrace`` in chat mode (the prompt formatted as `chat_prompt` does)."""
    try:
        from flashtrace import FlashTrace
    except ImportError as exc:
        raise ImportError(
            "FlashTrace is not installed: pip install --no-deps -r requirements-bench.txt"
        ) from exc
    return FlashTrace(model, tokenizer, use_chat_template=True, recompute_attention=recompute_attention)


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
