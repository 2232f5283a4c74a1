"""Word vocabulary for the agreement task.

The Linzen prefixes already replace words outside the 10k most common by their POS tag
(``NNP``, ``NNS``...), so a whitespace split is the tokenizer. Ids 0-3 are the specials,
always in this order: ``<pad>`` (0), ``<unk>`` (1), ``<cls>`` (2), ``<mask>`` (3); vocabularies built
here add ``<eos>`` (4), the end marker the authors' inputs carried in place of the verb (older
vocabularies without it still load; they cannot encode with ``add_eos``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from attnflow.io import write_text

PAD, UNK, CLS, MASK, EOS = "<pad>", "<unk>", "<cls>", "<mask>", "<eos>"
SPECIALS: tuple[str, ...] = (PAD, UNK, CLS, MASK)  # every vocabulary starts with these

__all__ = ["CLS", "EOS", "MASK", "PAD", "SPECIALS", "UNK", "Vocab"]


@dataclass(frozen=True)
class Vocab:
    """Maps words to ids; ``encode`` prepends ``<cls>`` as the agreement model expects.

    >>> v = Vocab.build([["the", "dog"], ["the", "cats"]], min_count=1)
    >>> v.encode("the dog barks")
    [2, 5, 7, 1]
    >>> v.decode(v.encode("the dog", add_eos=True))
    ['<cls>', 'the', 'dog', '<eos>']
    """

    itos: tuple[str, ...]
    stoi: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if tuple(self.itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocabulary must start with the specials {SPECIALS}, got {self.itos[:4]}")
        if len(set(self.itos)) != len(self.itos):
            raise ValueError("vocabulary has duplicate entries")
        object.__setattr__(self, "stoi", {w: i for i, w in enumerate(self.itos)})

    pad_id: ClassVar[int] = 0
    unk_id: ClassVar[int] = 1
    cls_id: ClassVar[int] = 2
    mask_id: ClassVar[int] = 3

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def eos_id(self) -> int | None:
        """The id of ``<eos>``; None for a vocabulary built before it existed."""
        return self.stoi.get(EOS)

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], *, min_count: int = 1) -> Vocab:
        """Specials and ``<eos>``, then every word seen at least ``min_count`` times, by frequency
        then alphabet."""
        counts = Counter(w for words in sentences for w in words)
        words = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in (*SPECIALS, EOS)),
            key=lambda w: (-counts[w], w),
        )
        return cls((*SPECIALS, EOS, *words))

    def encode(self, text: str | Sequence[str], *, add_cls: bool = True, add_eos: bool = False) -> list[int]:
        """Word ids, ``<cls>`` first (``add_cls``) and ``<eos>`` last (``add_eos``)."""
        words = text.split() if isinstance(text, str) else list(text)
        ids = [self.stoi.get(w, self.unk_id) for w in words]
        if add_eos:
            if self.eos_id is None:
                raise ValueError("this vocabulary has no <eos> (built before it existed): rebuild it")
            ids.append(self.eos_id)
        return [self.cls_id, *ids] if add_cls else ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[int(i)] for i in ids]

    def save(self, path: str | Path) -> None:
        """Write ``{"itos": [...]}`` atomically."""
        write_text(path, json.dumps({"itos": list(self.itos)}, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            itos = payload["itos"]
        except FileNotFoundError:
            raise FileNotFoundError(f"vocabulary file not found: {path}") from None
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a vocabulary file ({exc})") from None
        try:
            return cls(tuple(itos))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
