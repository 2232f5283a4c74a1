"""GLUE SST-2: labelled train and dev; the unlabelled test split kept apart (label -1).

GLUE keeps a trailing space before the tab (``"hide new secretions ... units \\t0"``); text is
stripped. The test split's labels are hidden: its rows carry label -1 and no stage may score them
as if they had labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnflow.data.lines import DataFormatError, length_stats, read_fields, require_rows
from attnflow.io import atomic_path, write_json

__all__ = ["UNLABELLED", "prepare_sst2", "read_glue_tsv"]

SUBDIR = Path("glue_SST-2")
UNLABELLED = -1


def read_glue_tsv(path: Path, *, labelled: bool) -> pd.DataFrame:
    """Parse a GLUE SST-2 file: ``sentence<TAB>label`` (train/dev) or ``index<TAB>sentence`` (test)."""
    header = ("sentence", "label") if labelled else ("index", "sentence")
    texts, labels = [], []
    for number, fields in read_fields(path, 2, header=header):
        text = (fields[0] if labelled else fields[1]).strip()
        if not text:
            raise DataFormatError(f"{path}:{number}: empty sentence")
        if labelled:
            if fields[1] not in ("0", "1"):
                raise DataFormatError(f"{path}:{number}: unknown label {fields[1]!r} (expected 0 or 1)")
            labels.append(int(fields[1]))
        else:
            labels.append(UNLABELLED)
        texts.append(text)
    require_rows(path, len(texts))
    return pd.DataFrame(
        {"text": pd.Series(texts, dtype="string"), "label": np.asarray(labels, dtype=np.int8)}
    )


def prepare_sst2(raw: str | Path, out: str | Path) -> dict:
    """Write ``train.parquet``, ``dev.parquet``, ``test.parquet`` (unlabelled) and ``data_summary.json``."""
    folder = Path(raw) / SUBDIR
    paths = {name: folder / f"{name}.tsv" for name in ("train", "dev", "test")}
    absent = [str(p) for p in paths.values() if not p.is_file()]
    if absent:
        raise FileNotFoundError(f"missing SST-2 file(s): {', '.join(absent)}; run the download stage first")
    splits = {name: read_glue_tsv(p, labelled=name != "test") for name, p in paths.items()}
    summary: dict = {"task": "sst2"}
    for name, df in splits.items():
        lengths = df["text"].str.split().str.len().to_numpy()
        entry = {"n": len(df), "length_words": length_stats(lengths)}
        if name != "test":
            entry |= {
                "negative": int((df["label"] == 0).sum()),
                "positive": int((df["label"] == 1).sum()),
                "positive_fraction": round(float(df["label"].mean()), 4),
            }
        else:
            entry["labelled"] = False
        summary[name] = entry
    out = Path(out)
    for name, df in splits.items():
        with atomic_path(out / f"{name}.parquet") as tmp:
            df.to_parquet(tmp, index=False)
    write_json(out / "data_summary.json", summary)
    return summary
