"""Text -> padded model inputs, for both classifiers, with the same call.

``encode(texts, max_length=None)`` returns ``input_ids`` (B, T), ``attention_mask`` (B, T)
(1 = real token, right padding) and ``tokens`` (the unpadded token strings per text, ``<cls>``
or ``[CLS]`` first).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnflow.batches import pad_batch
from attnflow.data.vocab import Vocab

__all__ = ["HFEncoder", "WordEncoder"]


class WordEncoder:
    """Whitespace words through a :class:`Vocab`, ``<cls>`` first (the agreement model's input) and,
    with ``append_eos``, ``<eos>`` last (the authors' input: ``<bos>`` + prefix + ``<eos>``, the end
    marker standing where the verb would be).

    >>> enc = WordEncoder(Vocab.build([["the", "dog"]]))
    >>> out = enc.encode(["the dog", "dog"])
    >>> out["input_ids"].tolist(), out["attention_mask"].tolist(), out["tokens"][1]
    ([[2, 6, 5], [2, 5, 0]], [[1, 1, 1], [1, 1, 0]], ['<cls>', 'dog'])
    >>> WordEncoder(enc.vocab, max_length=3, append_eos=True).encode(["the dog"])["tokens"]
    [['<cls>', 'the', '<eos>']]
    """

    def __init__(self, vocab: Vocab, max_length: int | None = None, *, append_eos: bool = False) -> None:
        if append_eos and vocab.eos_id is None:
            raise ValueError("append_eos needs a vocabulary with <eos>; this one was built before it existed")
        self.vocab = vocab
        self.max_length = max_length
        self.append_eos = append_eos
        self.pad_id, self.unk_id = vocab.pad_id, vocab.unk_id
        self.cls_id, self.mask_id = vocab.cls_id, vocab.mask_id

    @property
    def end_positions(self) -> tuple[int, ...]:
        """Positions of end markers, counted from each input's last real token (-1 = the last)."""
        return (-1,) if self.append_eos else ()

    def __len__(self) -> int:
        return len(self.vocab)

    def encode_ids(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Unpadded ids per text (right-truncated to ``max_length``, ``<cls>`` and ``<eos>`` kept)."""
        limit = max_length or self.max_length
        rows = [self.vocab.encode(t) for t in texts]
        if limit:
            rows = [r[: limit - 1 if self.append_eos else limit] for r in rows]
        if self.append_eos:
            rows = [[*r, self.vocab.eos_id] for r in rows]
        return rows

    def encode(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, Any]:
        rows = self.encode_ids(texts, max_length)
        ids, mask = pad_batch(rows, self.pad_id)
        return {"input_ids": ids, "attention_mask": mask, "tokens": [self.vocab.decode(r) for r in rows]}

    def save(self, directory: str | Path) -> None:
        self.vocab.save(Path(directory) / "vocab.json")


class HFEncoder:
    """A Hugging Face tokenizer (``[CLS] ... [SEP]``), right padding."""

    def __init__(self, tokenizer: Any, max_length: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.pad_id = tokenizer.pad_token_id
        self.unk_id = tokenizer.unk_token_id
        self.mask_id = tokenizer.mask_token_id
        self.cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        self.end_positions = (-1,) if tokenizer.sep_token_id is not None else ()  # [SEP]

    def __len__(self) -> int:
        return len(self.tokenizer)

    def encode_ids(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Unpadded ids per text, special tokens included, truncated to ``max_length``."""
        limit = max_length or self.max_length
        out = self.tokenizer(list(texts), truncation=limit is not None, max_length=limit, padding=False)
        return [list(r) for r in out["input_ids"]]

    def encode(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, Any]:
        rows = self.encode_ids(texts, max_length)
        ids, mask = pad_batch(rows, self.pad_id)
        tokens = [self.tokenizer.convert_ids_to_tokens(r) for r in rows]
        return {"input_ids": ids, "attention_mask": mask, "tokens": tokens}

    def save(self, directory: str | Path) -> None:
        self.tokenizer.save_pretrained(str(directory))
