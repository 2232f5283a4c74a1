"""Tokens for display: sub-words merged into words (`word_groups`, `merge_scores`, `token_labels`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

# Sub-word markers: WordPiece continues a word with "##"; byte-level BPE (GPT-2, RoBERTa, Llama 3)
# and SentencePiece (Llama 2, T5) start a word with "Ġ" / "▁".
WORDPIECE_CONTINUATION = "##"
WORD_START_MARKERS = ("Ġ", "▁")


def word_groups(tokens: Sequence[str], *, special: Sequence[str] = ()) -> list[list[int]]:
    """Positions of the tokens that form each word, in order (every position in exactly one group).

    The scheme is read from the tokens: WordPiece pieces "##x" continue the previous word; with
    byte-level BPE ("Ġ") or SentencePiece ("▁") markers, a token without the marker continues the
    previous word. Special tokens ([CLS], <|endoftext|>, ...) are always words of their own.

    >>> word_groups(["[CLS]", "un", "##believ", "##able", "!", "[SEP]"], special=["[CLS]", "[SEP]"])
    [[0], [1, 2, 3], [4], [5]]
    >>> word_groups(["The", "Ġunbel", "iev", "able", "Ġfilm"])
    [[0], [1, 2, 3], [4]]
    """
    special = set(special)
    marker = next((m for m in WORD_START_MARKERS if any(t.startswith(m) for t in tokens)), None)
    wordpiece = marker is None or any(t.startswith(WORDPIECE_CONTINUATION) for t in tokens)
    groups: list[list[int]] = []
    for i, tok in enumerate(tokens):
        prev_special = i > 0 and tokens[i - 1] in special
        if wordpiece:
            continues = tok.startswith(WORDPIECE_CONTINUATION) and len(tok) > len(WORDPIECE_CONTINUATION)
        else:
            continues = not tok.startswith(marker)
        if groups and continues and tok not in special and not prev_special:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _strip_marker(token: str) -> str:
    for marker in WORD_START_MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            return token[len(marker) :]
    return token


def _word_text(pieces: Sequence[str], tokenizer: Any = None) -> str:
    """The readable text of a group of tokens (markers removed; byte-level bytes decoded)."""
    if tokenizer is not None and hasattr(tokenizer, "convert_tokens_to_string"):
        try:
            raw = tokenizer.convert_tokens_to_string(list(pieces))
        except Exception:  # a tokenizer without a decoder: fall back to marker stripping
            raw = ""
        text = raw.strip() if isinstance(raw, str) else ""
        if text:
            return text
        if isinstance(raw, str) and raw:  # only white space (byte-level "Ċ" = a newline): shown, not lost
            return visible_space(raw)
    first, rest = pieces[0], pieces[1:]
    text = _strip_marker(first) + "".join(
        p[len(WORDPIECE_CONTINUATION) :] if p.startswith(WORDPIECE_CONTINUATION) else _strip_marker(p)
        for p in rest
    )
    return text or first


# How a token that is only white space is shown: a newline, a tab, a space.
SPACE_SYMBOLS = {"\n": "⏎", "\t": "⇥", " ": "␣", "\r": "⏎"}


def visible_space(text: str) -> str:
    """White space drawn with symbols, so a newline or space token has a label.

    >>> visible_space("\\n\\n"), visible_space("  ")
    ('⏎⏎', '␣␣')
    """
    return "".join(SPACE_SYMBOLS.get(ch, "␣" if ch.isspace() else ch) for ch in text)


def merge_scores(scores: Any, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Scores [..., token] summed within each group -> [..., group] (attribution mass is kept).

    >>> merge_scores(np.array([[0.1, 0.2, 0.3, 0.4]]), [[0], [1, 2], [3]]).round(3).tolist()
    [[0.1, 0.5, 0.4]]
    """
    x = np.asarray(scores, dtype=np.float64)
    n = sum(len(g) for g in groups)
    if x.shape[-1] != n:
        raise ValueError(f"scores have {x.shape[-1]} tokens on the last axis, the groups cover {n}")
    return np.stack([x[..., list(g)].sum(axis=-1) for g in groups], axis=-1)


def merge_words(
    tokens: Sequence[str], scores: Any = None, *, special: Sequence[str] = (), tokenizer: Any = None
) -> tuple[list[str], np.ndarray | None]:
    """Sub-word tokens merged into words, and scores [..., token] summed over each word's pieces.

    >>> words, s = merge_words(["Ġa", "Ġgre", "at", "Ġfilm"], [0.1, 0.2, 0.3, 0.4])
    >>> words, s.round(3).tolist()
    (['a', 'great', 'film'], [0.1, 0.5, 0.4])
    """
    groups = word_groups(tokens, special=special)
    words = [_word_text([tokens[i] for i in g], tokenizer) for g in groups]
    return words, None if scores is None else merge_scores(scores, groups)


def token_labels(
    tokenizer: Any, input_ids: Sequence[int] | torch.Tensor, *, merge: bool = False
) -> tuple[list[str], list[list[int]]]:
    """Display labels for `input_ids` and the token positions behind each label.

    merge=False: one label per token (markers "Ġ" / "▁" removed, "##" kept so pieces stay
    visible); merge=True: one label per word (see `word_groups`); merge scores with
    `merge_scores(scores, groups)` so they stay aligned with the labels.
    """
    ids = input_ids.tolist() if isinstance(input_ids, torch.Tensor) else list(input_ids)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special = list(getattr(tokenizer, "all_special_tokens", []) or [])
    if merge:
        groups = word_groups(tokens, special=special)
    else:
        groups = [[i] for i in range(len(tokens))]
    return [_label([tokens[i] for i in g], tokenizer, special) for g in groups], groups


def _label(pieces: list[str], tokenizer: Any, special: Sequence[str]) -> str:
    if len(pieces) == 1 and (pieces[0] in special or pieces[0].startswith(WORDPIECE_CONTINUATION)):
        return pieces[0]
    return _word_text(pieces, tokenizer)
