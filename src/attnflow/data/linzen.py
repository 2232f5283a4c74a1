"""The Linzen et al. (2016) verb-number data: parse, split, build the vocabulary.

Each line is ``VBZ|VBP<TAB>prefix``: the sentence up to (not including) the verb, with words
outside the 10k vocabulary replaced by their POS tag. Labels: VBZ (singular) -> 0, VBP (plural) -> 1.

With the official files (numpred.train/val/test) the official 9/1/90 split is kept. Without them
(the offline mirror has only numpred.val and the attractor files numpred.test.1-5), every labelled
file present is pooled and split, seeded and stratified by (label, attractor count). Each sample
keeps its attractor count (from the numpred.test.k file it came from; -1 when unknown) and its
source file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from attnflow.data._lines import DataFormatError, length_stats, read_fields, require_rows
from attnflow.data.vocab import Vocab
from attnflow.io import atomic_path, write_json

__all__ = ["LABELS", "SplitFractions", "prepare_agreement", "read_numpred"]

LABELS = {"VBZ": 0, "VBP": 1}
SUBDIR = Path("rnn_agr_simple")
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SplitFractions:
    train: float = 0.8
    val: float = 0.1
    test: float = 0.1

    def __post_init__(self) -> None:
        parts = (self.train, self.val, self.test)
        if min(parts) < 0 or abs(sum(parts) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must be >= 0 and sum to 1, got {parts}")


def read_numpred(path: Path, *, n_attractors: int = -1) -> pd.DataFrame:
    """Parse one numpred file into columns text, label, n_attractors, source."""
    texts, labels = [], []
    for number, (tag, prefix) in read_fields(path, 2):
        if tag not in LABELS:
            raise DataFormatError(f"{path}:{number}: unknown label {tag!r} (expected VBZ or VBP)")
        prefix = prefix.strip()
        if not prefix:
            raise DataFormatError(f"{path}:{number}: empty prefix")
        texts.append(prefix)
        labels.append(LABELS[tag])
    require_rows(path, len(texts))
    return pd.DataFrame(
        {
            "text": pd.Series(texts, dtype="string"),
            "label": np.asarray(labels, dtype=np.int8),
            "n_attractors": np.full(len(texts), n_attractors, dtype=np.int8),
            "source": pd.Series([path.name] * len(texts), dtype="string"),
        }
    )


def _find(folder: Path, *names: str) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def _attractor_files(folder: Path) -> dict[int, Path]:
    return {k: folder / f"numpred.test.{k}" for k in range(6) if (folder / f"numpred.test.{k}").is_file()}


def _stratified_split(frame: pd.DataFrame, fractions: SplitFractions, seed: int) -> dict[str, pd.DataFrame]:
    """Shuffle each (label, attractors) group with one seeded generator and cut it by the fractions."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    for _, index in sorted(frame.groupby(["label", "n_attractors"]).indices.items()):
        index = rng.permutation(index)
        n_train = round(len(index) * fractions.train)
        n_val = round(len(index) * fractions.val)
        parts["train"].append(index[:n_train])
        parts["val"].append(index[n_train : n_train + n_val])
        parts["test"].append(index[n_train + n_val :])
    return {s: frame.iloc[np.sort(np.concatenate(p))].reset_index(drop=True) for s, p in parts.items()}


def _summary(splits: dict[str, pd.DataFrame], **extra) -> dict:
    out: dict = dict(extra)
    for name, df in splits.items():
        lengths = df["text"].str.split().str.len().to_numpy()
        out[name] = {
            "n": len(df),
            "singular": int((df["label"] == 0).sum()),
            "plural": int((df["label"] == 1).sum()),
            "plural_fraction": round(float(df["label"].mean()), 4) if len(df) else 0.0,
            "length_words": length_stats(lengths),
            "attractors": {str(k): int(v) for k, v in sorted(df["n_attractors"].value_counts().items())},
        }
    return out


def prepare_agreement(
    raw: str | Path,
    out: str | Path,
    *,
    fractions: SplitFractions = SplitFractions(),
    seed: int = 0,
    dedupe: bool = True,
    min_count: int = 1,
) -> dict:
    """Write ``{train,val,test}.parquet``, ``vocab.json`` and ``data_summary.json`` into ``out``.

    Everything is parsed and checked before the first file is written.
    """
    folder = Path(raw) / SUBDIR
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no Linzen data; run the download stage first")
    attractor_files = _attractor_files(folder)
    train_f, val_f = _find(folder, "numpred.train"), _find(folder, "numpred.val", "numpred.valid")
    test_f = _find(folder, "numpred.test")
    if train_f and val_f and test_f:
        mode = "official"
        splits = {"train": read_numpred(train_f), "val": read_numpred(val_f), "test": read_numpred(test_f)}
        # The attractor files are subsets of the test split: carry their counts over by (label, text).
        known = pd.concat(
            [read_numpred(p, n_attractors=k) for k, p in attractor_files.items()] or [splits["test"].iloc[:0]]
        )
        lookup = dict(
            zip(zip(known["label"], known["text"], strict=True), known["n_attractors"], strict=True)
        )
        test = splits["test"]
        test["n_attractors"] = np.array(
            [lookup.get(key, -1) for key in zip(test["label"], test["text"], strict=True)], dtype=np.int8
        )
        n_dupes = 0
    else:
        mode = "pooled"
        pieces = [read_numpred(p, n_attractors=k) for k, p in attractor_files.items()]
        if val_f:
            pieces.append(read_numpred(val_f))
        if not pieces:
            raise FileNotFoundError(f"{folder}: no numpred files found")
        pool = pd.concat(pieces, ignore_index=True)
        n_dupes = 0
        if dedupe:
            # Attractor files come first, so a prefix seen there keeps its known attractor count.
            keep = ~pool.duplicated(subset=["label", "text"], keep="first")
            n_dupes = int((~keep).sum())
            pool = pool[keep].reset_index(drop=True)
        splits = _stratified_split(pool, fractions, seed)

    vocab = Vocab.build((t.split() for t in splits["train"]["text"]), min_count=min_count)
    summary = _summary(
        splits,
        task="agreement",
        split_mode=mode,
        seed=seed,
        duplicates_removed=n_dupes,
        vocab_size=len(vocab),
        sources=sorted({str(s) for df in splits.values() for s in df["source"].unique()}),
    )
    out = Path(out)
    for name, df in splits.items():
        with atomic_path(out / f"{name}.parquet") as tmp:
            df.to_parquet(tmp, index=False)
    vocab.save(out / "vocab.json")
    write_json(out / "data_summary.json", summary)
    return summary
