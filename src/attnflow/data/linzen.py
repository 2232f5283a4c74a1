"""The Linzen et al. (2016) verb-number data: parse, split, build the vocabulary.

An item is a sentence prefix up to (not including) the verb, with words outside Linzen's 10k
vocabulary replaced by their POS tag; label VBZ (singular) -> 0, VBP (plural) -> 1. Three formats:

- ``numpred.*`` (``rnn_agr_simple``): ``VBZ|VBP<TAB>prefix``; ``numpred.test.k`` hold items with
  exactly k attractors (intervening nouns of the other number), an attractor-only stress test.
- the natural-distribution sample ``edinburgh_nlu_wiki/wiki-{train,dev,test}.txt``: header
  ``sentence subj_idx verb_idx verb_pos verb inflected_verb``, 0-based word indices into the full
  sentence; the prefix is ``sentence.split()[:verb_idx]``.
- Linzen's full ``agr_50_mostcommon_10K.tsv``: a header naming at least ``sentence``,
  ``verb_index`` (1-based), ``verb_pos``; ``subj_index`` and ``n_diff_intervening`` when present.

Two ways to split (``source``):

- ``natural`` (default; the paper's distribution): the authors' split of the full TSV when it was
  downloaded (numpy seed 42 shuffle, 10% train / 1% valid / the rest test, as their data builder),
  else the wiki sample's own train / dev / test. ``extra_train`` adds more training files (e.g.
  ``numpred.val``). The attractor files become the evaluation-only split ``attractors``.
- ``pooled`` (the old study): the official numpred 9/1/90 split when its files are there, else
  numpred.val plus numpred.test.1-5 pooled, de-duplicated and split by ``fractions``, seeded and
  stratified by (label, attractor count); ``attractors`` is then the test items with a known count.

Leak rule (both): no exact prefix of a training item appears in any evaluation split (val, test,
attractors); such training items are dropped and counted. Every item keeps its attractor count
(-1 when unknown), subject index and subject-verb distance (-1 when unknown) and its source file.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from attnflow.data.lines import DataFormatError, length_stats, read_fields, require_rows
from attnflow.data.vocab import Vocab
from attnflow.io import write_json, write_parquet
from attnflow.options import DATA_SOURCES as SOURCES

__all__ = [
    "LABELS",
    "SOURCES",
    "SplitFractions",
    "authors_split",
    "drop_leaks",
    "prepare_agreement",
    "read_linzen_tsv",
    "read_numpred",
    "read_wiki",
]

LABELS = {"VBZ": 0, "VBP": 1}
SUBDIR = Path("rnn_agr_simple")
WIKI = Path("edinburgh_nlu_wiki")
FULL_TSV = "agr_50_mostcommon_10K.tsv"
SPLITS = ("train", "val", "test")
ATTRACTORS = "attractors"  # the evaluation-only split of attractor items
WIKI_HEADER = ("sentence", "subj_idx", "verb_idx", "verb_pos", "verb", "inflected_verb")


@dataclass(frozen=True)
class SplitFractions:
    train: float = 0.8
    val: float = 0.1
    test: float = 0.1

    def __post_init__(self) -> None:
        parts = (self.train, self.val, self.test)
        if min(parts) < 0 or abs(sum(parts) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must be >= 0 and sum to 1, got {parts}")


def _frame(texts, labels, source: str, *, attractors=None, subject=None, distance=None) -> pd.DataFrame:
    n = len(texts)

    def column(values, fill):
        return np.asarray(values if values is not None else [fill] * n, dtype=np.int16)

    return pd.DataFrame(
        {
            "text": pd.Series(texts, dtype="string"),
            "label": np.asarray(labels, dtype=np.int8),
            "n_attractors": column(attractors, -1).astype(np.int8),
            "subject_index": column(subject, -1),
            "distance": column(distance, -1),
            "source": pd.Series([source] * n, dtype="string"),
        }
    )


def read_numpred(path: Path, *, n_attractors: int = -1) -> pd.DataFrame:
    """Parse one numpred file (``VBZ|VBP<TAB>prefix`` per line)."""
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
    return _frame(texts, labels, path.name, attractors=[n_attractors] * len(texts))


def read_wiki(path: Path) -> pd.DataFrame:
    """Parse one natural-distribution file: full sentence + 0-based verb index -> prefix and label.

    The prefix is every word before the verb; ``subject_index`` and ``distance`` (verb index minus
    subject index) are kept; the attractor count is unknown (-1).
    """
    texts, labels, subject, distance = [], [], [], []
    for number, fields in read_fields(path, len(WIKI_HEADER), header=WIKI_HEADER):
        sentence, subj, verb, tag = fields[0], fields[1], fields[2], fields[3]
        if tag not in LABELS:
            raise DataFormatError(f"{path}:{number}: unknown verb_pos {tag!r} (expected VBZ or VBP)")
        words = sentence.split()
        if not (subj.isdigit() and verb.isdigit()):
            raise DataFormatError(
                f"{path}:{number}: subj_idx / verb_idx must be integers, got {subj!r} / {verb!r}"
            )
        s, v = int(subj), int(verb)
        if not 0 < v < len(words) or not s < v:
            raise DataFormatError(
                f"{path}:{number}: verb_idx {v} and subj_idx {s} do not fit a sentence of {len(words)} words "
                "(need subj_idx < verb_idx < words)"
            )
        texts.append(" ".join(words[:v]))
        labels.append(LABELS[tag])
        subject.append(s)
        distance.append(v - s)
    require_rows(path, len(texts))
    return _frame(texts, labels, path.name, subject=subject, distance=distance)


def read_linzen_tsv(path: Path) -> pd.DataFrame:
    """Parse Linzen's full TSV (the file the authors split): prefix = the words before the 1-based
    ``verb_index``; attractors = ``n_diff_intervening`` and subject = ``subj_index`` when present."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        needed = {"sentence", "verb_index", "verb_pos"}
        if missing := sorted(needed - set(reader.fieldnames or [])):
            raise DataFormatError(f"{path}:1: header lacks column(s) {missing}")
        texts, labels, attractors, subject, distance = [], [], [], [], []
        for number, row in enumerate(reader, start=2):
            tag, words = row["verb_pos"], (row["sentence"] or "").split()
            try:
                v = int(row["verb_index"]) - 1
                s = int(row["subj_index"]) - 1 if row.get("subj_index") else -1
                k = int(row["n_diff_intervening"]) if row.get("n_diff_intervening") else -1
            except (TypeError, ValueError):
                raise DataFormatError(
                    f"{path}:{number}: verb_index / subj_index / n_diff_intervening not integers"
                ) from None
            if tag not in LABELS:
                raise DataFormatError(f"{path}:{number}: unknown verb_pos {tag!r} (expected VBZ or VBP)")
            if not 0 < v < len(words):
                raise DataFormatError(f"{path}:{number}: verb_index {v + 1} does not fit {len(words)} words")
            texts.append(" ".join(words[:v]))
            labels.append(LABELS[tag])
            attractors.append(k)
            subject.append(s)
            distance.append(v - s if s >= 0 else -1)
    require_rows(path, len(texts))
    return _frame(texts, labels, path.name, attractors=attractors, subject=subject, distance=distance)


def authors_split(
    frame: pd.DataFrame, *, seed: int = 42, train: float = 0.1, valid: float = 0.01
) -> dict[str, pd.DataFrame]:
    """The authors' data builder: numpy's global shuffle with ``seed`` (``np.random.seed(42);
    np.random.shuffle(data)``), then ``int(n * train)`` train, ``int(n * valid)`` valid, the rest test.

    >>> df = pd.DataFrame({"text": list("abcdefghijklmnopqrstuvwxyz" * 4)})
    >>> {k: len(v) for k, v in authors_split(df, train=0.1, valid=0.05).items()}
    {'train': 10, 'val': 5, 'test': 89}
    """
    order = np.arange(len(frame))
    np.random.RandomState(seed).shuffle(order)  # = np.random.seed(seed); np.random.shuffle(list)
    n_train, n_valid = int(len(frame) * train), int(len(frame) * valid)
    cuts = {
        "train": order[:n_train],
        "val": order[n_train : n_train + n_valid],
        "test": order[n_train + n_valid :],
    }
    return {name: frame.iloc[idx].reset_index(drop=True) for name, idx in cuts.items()}


def drop_leaks(train: pd.DataFrame, evaluation: Iterable[pd.DataFrame]) -> tuple[pd.DataFrame, int]:
    """Training items whose exact prefix occurs in any evaluation frame removed; and how many.

    >>> train = pd.DataFrame({"text": ["the dog", "the dogs", "a cat"]})
    >>> kept, n = drop_leaks(train, [pd.DataFrame({"text": ["a cat"]})])
    >>> kept["text"].tolist(), n
    (['the dog', 'the dogs'], 1)
    """
    seen = set().union(*(set(df["text"].tolist()) for df in evaluation))
    leak = train["text"].isin(seen).to_numpy()
    return train[~leak].reset_index(drop=True), int(leak.sum())


def _find(folder: Path, *names: str) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def _attractor_files(folder: Path) -> dict[int, Path]:
    return {k: folder / f"numpred.test.{k}" for k in range(1, 6) if (folder / f"numpred.test.{k}").is_file()}


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


def _pooled(folder: Path, fractions: SplitFractions, seed: int, dedupe: bool) -> tuple[dict, dict]:
    """The old study's splits: official numpred 9/1/90 when present, else the pooled mirror files."""
    attractor_files = _attractor_files(folder)
    train_f, val_f = _find(folder, "numpred.train"), _find(folder, "numpred.val", "numpred.valid")
    test_f = _find(folder, "numpred.test")
    known = [read_numpred(p, n_attractors=k) for k, p in attractor_files.items()]
    if train_f and val_f and test_f:
        splits = {"train": read_numpred(train_f), "val": read_numpred(val_f), "test": read_numpred(test_f)}
        # The attractor files are subsets of the test split: carry their counts over by (label, text).
        pool = pd.concat(known) if known else splits["test"].iloc[:0]
        lookup = dict(zip(zip(pool["label"], pool["text"], strict=True), pool["n_attractors"], strict=True))
        test = splits["test"]
        keys = zip(test["label"], test["text"], strict=True)
        test["n_attractors"] = np.array([lookup.get(key, -1) for key in keys], dtype=np.int8)
        return splits, {"split_mode": "official", "duplicates_removed": 0}
    pieces = known + ([read_numpred(val_f)] if val_f else [])
    if not pieces:
        raise FileNotFoundError(f"{folder}: no numpred files found")
    pool = pd.concat(pieces, ignore_index=True)
    n_dupes = 0
    if dedupe:  # attractor files come first, so a prefix seen there keeps its known attractor count
        keep = ~pool.duplicated(subset=["label", "text"], keep="first")
        n_dupes, pool = int((~keep).sum()), pool[keep].reset_index(drop=True)
    return _stratified_split(pool, fractions, seed), {"split_mode": "pooled", "duplicates_removed": n_dupes}


def _natural(raw: Path, extra_train: Sequence[str]) -> tuple[dict, dict]:
    """The paper's distribution: the authors' split of the full TSV, else the wiki sample."""
    if (raw / FULL_TSV).is_file():
        splits, mode = authors_split(read_linzen_tsv(raw / FULL_TSV)), "authors_full_tsv"
    elif all((raw / WIKI / f"wiki-{s}.txt").is_file() for s in ("train", "dev", "test")):
        splits = {
            name: read_wiki(raw / WIKI / f"wiki-{s}.txt")
            for name, s in (("train", "train"), ("val", "dev"), ("test", "test"))
        }
        mode = "wiki_sample"
    else:
        raise FileNotFoundError(
            f"{raw}: no natural-distribution data ({FULL_TSV} or {WIKI}/wiki-{{train,dev,test}}.txt); "
            "run the download stage, or set task.agreement.data.source=pooled"
        )
    for name in extra_train:
        path = raw / SUBDIR / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: listed in task.agreement.data.extra_train but not downloaded")
        splits["train"] = pd.concat([splits["train"], read_numpred(path)], ignore_index=True)
    return splits, {"split_mode": mode}


def prepare_agreement(
    raw: str | Path,
    out: str | Path,
    *,
    source: str = "natural",
    extra_train: Sequence[str] = (),
    fractions: SplitFractions = SplitFractions(),
    seed: int = 0,
    dedupe: bool = True,
    min_count: int = 1,
) -> dict:
    """Write ``train/val/test/attractors.parquet``, ``vocab.json`` and ``data_summary.json`` into ``out``.

    Everything is parsed, split and checked before the first file is written.
    """
    raw = Path(raw)
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    folder = raw / SUBDIR
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no Linzen data; run the download stage first")
    if source == "natural":
        splits, info = _natural(raw, extra_train)
        known = [read_numpred(p, n_attractors=k) for k, p in _attractor_files(folder).items()]
        splits[ATTRACTORS] = pd.concat(known, ignore_index=True) if known else splits["test"].iloc[:0]
    else:
        splits, info = _pooled(folder, fractions, seed, dedupe)
        splits[ATTRACTORS] = splits["test"][splits["test"]["n_attractors"] >= 1].reset_index(drop=True)
    evaluation = [df for name, df in splits.items() if name != "train"]
    splits["train"], info["leaks_dropped"] = drop_leaks(splits["train"], evaluation)
    for name, df in splits.items():
        if df.empty:
            raise DataFormatError(f"{raw}: the {name!r} split is empty ({info['split_mode']} split)")
    vocab = Vocab.build((t.split() for t in splits["train"]["text"]), min_count=min_count)
    summary = _summary(
        splits,
        task="agreement",
        source=source,
        **info,
        seed=seed,
        vocab_size=len(vocab),
        sources=sorted({str(s) for df in splits.values() for s in df["source"].unique()}),
    )
    out = Path(out)
    for name, df in splits.items():
        write_parquet(out / f"{name}.parquet", df)
    vocab.save(out / "vocab.json")
    write_json(out / "data_summary.json", summary)
    return summary


def _summary(splits: dict[str, pd.DataFrame], **extra) -> dict:
    out: dict = dict(extra)
    for name, df in splits.items():
        lengths = df["text"].str.split().str.len().to_numpy()
        distance = df["distance"][df["distance"] >= 0].to_numpy()
        out[name] = {
            "n": len(df),
            "singular": int((df["label"] == 0).sum()),
            "plural": int((df["label"] == 1).sum()),
            "plural_fraction": round(float(df["label"].mean()), 4) if len(df) else 0.0,
            "length_words": length_stats(lengths),
            "attractors": {str(k): int(v) for k, v in sorted(df["n_attractors"].value_counts().items())},
        }
        if distance.size:
            out[name]["subject_verb_distance"] = length_stats(distance)
    return out
