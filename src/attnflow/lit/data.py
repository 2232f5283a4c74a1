"""Prepared parquet splits -> tokenised, padded batches, in an order fixed by (seed, epoch).

A split is ``{split}.parquet`` with columns ``text`` and ``label`` (and, for agreement,
``n_attractors``). Text is tokenised once, at setup, by the task's encoder
(:class:`attnflow.models.WordEncoder` or :class:`attnflow.models.HFEncoder`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from attnflow.batches import pad_batch
from attnflow.data.subsets import seeded_split
from attnflow.io import read_parquet

__all__ = ["EpochShuffleSampler", "TextClassificationDataModule", "TokenisedDataset", "read_split"]

_BUCKET_BATCHES = 50  # length-sort within windows of this many batches: little padding, still random
_ENCODE_CHUNK = 4096


def read_split(path: str | Path) -> pd.DataFrame:
    """One prepared split, checked: ``text`` and ``label`` present, labels known (>= 0)."""
    path = Path(path)
    df = read_parquet(path)
    if missing := sorted({"text", "label"} - set(df.columns)):
        raise ValueError(f"{path}: missing columns {missing} (have {list(df.columns)})")
    if (df["label"] < 0).any():
        raise ValueError(f"{path}: {(df['label'] < 0).sum()} rows have no label (-1); not usable here")
    return df.reset_index(drop=True)


class TokenisedDataset(Dataset):
    """Unpadded token ids + label (+ attractor count, -1 if unknown) per row."""

    def __init__(
        self, ids: list[list[int]], labels: Sequence[int], n_attractors: Sequence[int] | None = None
    ):
        self.ids = ids
        self.labels = [int(x) for x in labels]
        self.n_attractors = [int(x) for x in n_attractors] if n_attractors is not None else [-1] * len(ids)
        self.lengths = [len(r) for r in ids]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[list[int], int, int]:
        return self.ids[i], self.labels[i], self.n_attractors[i]


class _Collate:
    """Right-pad a list of rows to the longest one."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, rows: list[tuple[list[int], int, int]]) -> dict[str, torch.Tensor]:
        ids, mask = pad_batch([r[0] for r in rows], self.pad_id)  # (B, T) each
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": torch.tensor([r[1] for r in rows], dtype=torch.long),  # (B,)
            "n_attractors": torch.tensor([r[2] for r in rows], dtype=torch.long),  # (B,)
        }


class EpochShuffleSampler(Sampler[int]):
    """A permutation that depends only on ``(seed, epoch)``, so a resumed run sees the same order.

    With ``bucketing``, indices are length-sorted inside windows of ``50 * batch_size`` shuffled
    indices and whole batches are then shuffled (the one short batch goes last), so consecutive
    ``batch_size`` indices have similar lengths. Lightning calls ``set_epoch`` every epoch.
    """

    def __init__(self, lengths: Sequence[int], *, batch_size: int, seed: int, bucketing: bool = True) -> None:
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        self.batch_size = batch_size
        self.seed = seed
        self.bucketing = bucketing
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        perm = torch.randperm(len(self.lengths), generator=g)
        if not self.bucketing:
            return iter(perm.tolist())
        window = self.batch_size * _BUCKET_BATCHES
        batches = []
        for start in range(0, len(perm), window):
            chunk = perm[start : start + window]
            chunk = chunk[torch.argsort(self.lengths[chunk], stable=True)]
            batches.extend(chunk.split(self.batch_size))
        full = [b for b in batches if len(b) == self.batch_size]
        short = [b for b in batches if len(b) != self.batch_size]
        order = torch.randperm(len(full), generator=g).tolist()
        return iter(torch.cat([full[i] for i in order] + short).tolist() if batches else [])


class TextClassificationDataModule(pl.LightningDataModule):
    """Train / val / eval loaders over ``data_dir/{split}.parquet``.

    ``val_size``: carve a seeded validation set out of train (for SST-2, whose dev split is the
    evaluation split) instead of reading ``val_split``. ``train_subset``: then keep a seeded
    random subset of the remaining training rows.
    """

    def __init__(
        self,
        data_dir: str | Path,
        encoder: Any,
        *,
        train_split: str = "train",
        val_split: str = "val",
        eval_split: str = "test",
        batch_size: int = 64,
        eval_batch_size: int = 256,
        max_length: int | None = None,
        train_subset: int | None = None,
        val_size: int | None = None,
        length_bucketing: bool = True,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.encoder = encoder
        self.train_split, self.val_split, self.eval_split = train_split, val_split, eval_split
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.max_length = max_length
        self.train_subset, self.val_size = train_subset, val_size
        self.length_bucketing = length_bucketing
        self.num_workers = num_workers
        self.seed = seed
        self.train: TokenisedDataset | None = None
        self.val: TokenisedDataset | None = None
        self.eval: TokenisedDataset | None = None

    def _tokenise(self, df: pd.DataFrame) -> TokenisedDataset:
        texts = df["text"].astype(str).tolist()
        ids: list[list[int]] = []
        for start in range(0, len(texts), _ENCODE_CHUNK):
            ids.extend(self.encoder.encode_ids(texts[start : start + _ENCODE_CHUNK], self.max_length))
        attractors = df["n_attractors"].tolist() if "n_attractors" in df.columns else None
        return TokenisedDataset(ids, df["label"].tolist(), attractors)

    def setup(self, stage: str | None = None) -> None:
        """``fit`` (or None): train, val and eval splits; ``test``/``validate``: the eval split only."""
        if self.eval is None:
            self.eval = self._tokenise(read_split(self.data_dir / f"{self.eval_split}.parquet"))
        if stage not in (None, "fit") or self.train is not None:
            return
        train = read_split(self.data_dir / f"{self.train_split}.parquet")
        rng = np.random.default_rng(self.seed)
        if self.val_size:
            if self.val_size >= len(train):
                raise ValueError(f"val_size {self.val_size} >= {len(train)} training rows")
            held, kept = seeded_split(len(train), self.val_size, rng)
            val, train = train.iloc[held].reset_index(drop=True), train.iloc[kept].reset_index(drop=True)
        else:
            val = read_split(self.data_dir / f"{self.val_split}.parquet")
        if self.train_subset and self.train_subset < len(train):
            keep, _ = seeded_split(len(train), self.train_subset, rng)
            train = train.iloc[keep].reset_index(drop=True)
        self.train, self.val = self._tokenise(train), self._tokenise(val)

    def _loader(self, ds: TokenisedDataset, *, train: bool) -> DataLoader:
        if train:
            sampler = EpochShuffleSampler(
                ds.lengths, batch_size=self.batch_size, seed=self.seed, bucketing=self.length_bucketing
            )
        else:
            sampler = None
        return DataLoader(
            ds,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=sampler,
            shuffle=False,
            collate_fn=_Collate(self.encoder.pad_id),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        assert self.train is not None, "call setup() first"
        return self._loader(self.train, train=True)

    def val_dataloader(self) -> DataLoader:
        assert self.val is not None, "call setup() first"
        return self._loader(self.val, train=False)

    def test_dataloader(self) -> DataLoader:
        assert self.eval is not None, "call setup() first"
        return self._loader(self.eval, train=False)

    def split_dataloader(self, split: str) -> DataLoader:
        """An evaluation loader over any prepared split (e.g. an evaluation-only set)."""
        return self._loader(self._tokenise(read_split(self.data_dir / f"{split}.parquet")), train=False)
