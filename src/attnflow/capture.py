"""The study's capture: run a classifier over samples (`attnflow.bridge.forward`) and keep, per sample,
what the explainers need.

The model follows the ``attnflow.models`` interface: ``model(input_ids, attention_mask,
output_attentions=True)`` returns logits ``(B, C)`` and attentions ``(B, L, H, T, T)``
(axis order batch, layer, head, query, key). Each sample's attentions are cut to its own length
``T_i`` (padding dropped), so downstream code sees ``(L, H, T_i, T_i)`` arrays whose rows are
probability distributions over real tokens.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from attnflow.batches import length_batches
from attnflow.bridge import forward
from attnflow.data.subsets import seeded_split
from attnflow.modes import eval_mode
from attnflow.options import CAPTURE_SELECTIONS as SELECTIONS

__all__ = [
    "CLASS_INPUTS",
    "SELECTIONS",
    "CapturedSamples",
    "StudySamples",
    "capture",
    "capture_split",
    "capture_study",
    "class_relevance",
    "need_values",
    "select_samples",
]

# What the class-specific explainers need beside the attentions (attnflow.methods.EXPLAINER_INPUTS).
CLASS_INPUTS = ("attn_grad", "attn_relevance")


@dataclass
class CapturedSamples:
    """Per-sample model outputs; lists are aligned with the input texts."""

    input_ids: list[np.ndarray]  # (T_i,) int64
    tokens: list[list[str]]
    attentions: list[np.ndarray]  # (L, H, T_i, T_i)
    probs: np.ndarray  # (N, C) float32

    @property
    def predictions(self) -> np.ndarray:
        return self.probs.argmax(axis=1)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(ids) for ids in self.input_ids])


@torch.no_grad()
def capture(
    model: torch.nn.Module,
    encoder: Any,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    dtype: np.dtype | str = np.float32,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> CapturedSamples:
    """Run ``model`` over ``texts`` in length-sorted batches and keep per-sample attentions.

    ``encoder.encode(texts, max_length)`` must return ``input_ids`` and ``attention_mask``
    ``(B, T)`` and ``tokens``. The model is put in eval mode and restored afterwards.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(texts)
    # Encode once to learn the lengths, then batch similar lengths together (less padding).
    lengths = [len(ids) for ids in encoder.encode_ids(list(texts), max_length=max_length)]
    input_ids: list[np.ndarray | None] = [None] * n
    tokens: list[list[str] | None] = [None] * n
    attentions: list[np.ndarray | None] = [None] * n
    probs: np.ndarray | None = None
    with eval_mode(model):
        for idx in tqdm(
            length_batches(lengths, batch_size), desc="capture", disable=not progress, leave=False
        ):
            batch = encoder.encode([texts[i] for i in idx], max_length=max_length)
            ids = batch["input_ids"].to(device)
            mask = batch["attention_mask"].to(device)
            out = forward(model, {"input_ids": ids, "attention_mask": mask})
            p = torch.softmax(out.logits.float(), dim=-1).cpu().numpy()
            if probs is None:
                probs = np.zeros((n, p.shape[1]), dtype=np.float32)
            att = out.attentions.float().cpu().numpy()  # (B, L, H, T, T)
            real = mask.sum(dim=1).cpu().numpy()
            for row, i in enumerate(idx):
                t = int(real[row])
                input_ids[i] = ids[row, :t].cpu().numpy().astype(np.int64)
                tokens[i] = list(batch["tokens"][row][:t])
                attentions[i] = att[row, :, :, :t, :t].astype(dtype)
                probs[i] = p[row]
    return CapturedSamples(  # type: ignore[arg-type]
        input_ids, tokens, attentions, probs if probs is not None else np.zeros((0, 2), np.float32)
    )


def select_samples(frame: pd.DataFrame, n: int, seed: int, select: str = "random") -> pd.DataFrame:
    """``n`` rows (all rows if ``n`` >= len) in file order, with ``sample_id`` = the row's position in
    ``frame`` (the id every later stage joins on): a seeded random subset (``select="random"``) or
    the first ``n`` (``"first"``, the authors' notebook: the first 100 validation examples).

    >>> select_samples(pd.DataFrame({"text": list("abcde")}), 2, seed=0, select="first")["text"].tolist()
    ['a', 'b']
    """
    if select not in SELECTIONS:
        raise ValueError(f"select must be one of {SELECTIONS}, got {select!r}")
    if n >= len(frame):
        if n > len(frame):
            warnings.warn(
                f"{n} samples asked for, the split has only {len(frame)}: using all of them", stacklevel=2
            )
        return frame.assign(sample_id=np.arange(len(frame))).reset_index(drop=True)
    if select == "first":
        index = np.arange(n)
    else:
        index, _ = seeded_split(len(frame), n, np.random.default_rng(seed))
    return frame.iloc[index].assign(sample_id=index).reset_index(drop=True)


def capture_split(
    model: torch.nn.Module,
    encoder: Any,
    frame: pd.DataFrame,
    *,
    n_samples: int,
    seed: int,
    select: str = "random",
    batch_size: int = 64,
    max_length: int | None = None,
    dtype: np.dtype | str = np.float32,
    device: str | torch.device = "cpu",
) -> tuple[pd.DataFrame, list[np.ndarray]]:
    """Select the study samples of one split and run the model on them.

    Returns the samples (the split's columns plus ``sample_id``, ``tokens``, ``input_ids``,
    ``length``, ``pred``, ``probs``) and each sample's attentions ``(L, H, T_i, T_i)``, in the same
    order. ``max_length`` is capped at the encoder's own limit.
    """
    if frame.empty:
        raise ValueError("the split has no rows to capture")
    samples = select_samples(frame, n_samples, seed, select)
    limit = getattr(encoder, "max_length", None)
    got = capture(
        model,
        encoder,
        samples["text"].tolist(),
        batch_size=batch_size,
        max_length=min(max_length, limit) if max_length and limit else (max_length or limit),
        dtype=np.dtype(dtype),
        device=device,
    )
    samples = samples.assign(
        tokens=got.tokens,
        input_ids=[ids.tolist() for ids in got.input_ids],
        length=got.lengths,
        pred=got.predictions.astype(np.int8),
        probs=[p.tolist() for p in got.probs],
    )
    return samples, got.attentions


def class_relevance(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    labels: Sequence[int],
    *,
    needs: Sequence[str] = CLASS_INPUTS,
    target: str | int = "predicted",
    pad_id: int = 0,
    batch_size: int = 64,
    device: str | torch.device = "cpu",
    dtype: np.dtype | str = np.float32,
    progress: bool = False,
) -> dict[str, list[np.ndarray]]:
    """Per sample, the inputs of the class-specific explainers (Chefer et al. 2021):
    ``attn_grad`` = d logit[target] / d attention and ``attn_relevance`` = the LRP relevance of
    each attention map, both ``(L, H, T_i, T_i)``, from :func:`attnflow.lrp.lrp_relevance`.

    ``target``: "predicted" (the model's class), "gold" (``labels``) or a class index.
    """
    from attnflow.batches import pad_batch

    if unknown := sorted(set(needs) - set(CLASS_INPUTS)):
        raise ValueError(f"unknown class-specific input(s) {unknown}; known: {CLASS_INPUTS}")
    rows = [np.asarray(r) for r in input_ids]
    gold = np.asarray(labels)
    if target == "gold" and (gold < 0).any():
        raise ValueError("target 'gold' needs labelled samples; some have label -1")
    out: dict[str, list[Any]] = {k: [None] * len(rows) for k in needs}
    for idx in tqdm(
        length_batches([len(r) for r in rows], batch_size),
        desc="relevance",
        disable=not progress,
        leave=False,
    ):
        ids, mask = pad_batch([rows[i] for i in idx], pad_id)
        chosen = (
            None if target == "predicted" else torch.as_tensor(gold[idx]) if target == "gold" else int(target)
        )
        batch = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
        result = forward(model, batch, needs, target="predicted" if chosen is None else chosen)
        for name in needs:
            values = result.need(name).float().cpu().numpy()  # (B, L, H, T, T)
            for row, i in enumerate(idx):
                t = len(rows[i])
                out[name][i] = values[row, :, :, :t, :t].astype(dtype)
    return out


@dataclass
class StudySamples:
    """What the capture stage keeps: the samples (one row each, ``sample_id`` first-class), their
    attentions ``(L, H, T_i, T_i)`` and, for class-specific explainers, ``extra`` arrays by name."""

    samples: pd.DataFrame
    attentions: list[np.ndarray]
    extra: dict[str, list[np.ndarray]]

    def metrics(self) -> dict[str, float]:
        from attnflow.metrics.accuracy import labelled_accuracy

        s = self.samples
        return {
            "n_samples": len(s),
            "mean_length": float(s["length"].mean()),
            "accuracy": labelled_accuracy(s["label"], s["pred"]),
        }


def model_classes(model: Any) -> int | None:
    """How many classes `model` predicts, from its config (``n_classes``, or a Hugging Face model's
    ``num_labels``); None when it does not say."""
    for config in (getattr(model, "config", None), getattr(getattr(model, "hf", None), "config", None)):
        for name in ("n_classes", "num_labels"):
            value = getattr(config, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _check_target(target: str | int, n_classes: int | None) -> None:
    """A class index `target` names one of the model's `n_classes` classes (capture.target)."""
    if n_classes is None or target in ("predicted", "gold"):
        return
    if not 0 <= int(target) < n_classes:
        raise ValueError(
            f"capture.target={target}: the model has {n_classes} classes (0..{n_classes - 1}); "
            "use predicted, gold or one of them"
        )


def capture_study(
    model: torch.nn.Module,
    encoder: Any,
    frame: pd.DataFrame,
    *,
    n_samples: int,
    seed: int,
    select: str = "random",
    needs: Sequence[str] = (),
    target: str | int = "predicted",
    batch_size: int = 64,
    max_length: int | None = None,
    dtype: np.dtype | str = np.float16,
    device: str | torch.device = "cpu",
) -> StudySamples:
    """:func:`capture_split` and, when ``needs`` names them, the class-specific inputs of the
    same samples (:func:`class_relevance`, explaining class ``target``) and any other need a
    method reads (:func:`need_values`: its record's capturer).

    A class index ``target`` is checked against the model's classes (its config's ``n_classes`` /
    ``num_labels``) before any sample is run, and against the width of its outputs after;
    a ValueError names ``capture.target``."""
    _check_target(target, model_classes(model))
    samples, attentions = capture_split(
        model, encoder, frame, n_samples=n_samples, seed=seed, select=select, batch_size=batch_size,
        max_length=max_length,
        dtype=dtype, device=device,
    )  # fmt: skip
    if len(samples):
        _check_target(target, len(samples["probs"].iloc[0]))
    extra: dict[str, list[np.ndarray]] = {}
    if class_needs := [n for n in needs if n in CLASS_INPUTS]:
        extra = class_relevance(
            model, samples["input_ids"].tolist(), samples["label"].to_numpy(), needs=class_needs, target=target,
            pad_id=encoder.pad_id, batch_size=batch_size, device=device, progress=True,
        )  # fmt: skip
    if other := [n for n in needs if n not in CLASS_INPUTS]:
        extra.update(need_values(model, samples["input_ids"].tolist(), other, pad_id=encoder.pad_id,
                                 batch_size=batch_size, device=device))  # fmt: skip
    return StudySamples(samples, attentions, extra)


def need_values(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    needs: Sequence[str],
    *,
    pad_id: int = 0,
    batch_size: int = 64,
    device: str | torch.device = "cpu",
    dtype: np.dtype | str = np.float32,
) -> dict[str, list[np.ndarray]]:
    """Per sample, each need of ``needs`` as its record captures it (`attnflow.needs`: the record's
    capturer, run once per batch on the model, or on the Hugging Face model inside a study
    classifier), cut to the sample's real tokens along the record's token axes. A need no record
    captures is refused in one line naming it (a method from outside attnflow brings its own record,
    `attnflow.needs.register_need`)."""
    from attnflow.batches import pad_batch
    from attnflow.needs import NEEDS

    if missing := [n for n in needs if NEEDS.get(n) is None or NEEDS[n].capturer is None]:
        raise ValueError(f"no need record captures {missing}; a method's needs are registered with "
                         "attnflow.needs.register_need (a record with a capturer)")  # fmt: skip
    rows = [np.asarray(r) for r in input_ids]
    inner = getattr(model, "hf", model)  # the study's HFClassifier keeps the transformers model as .hf
    out: dict[str, list[Any]] = {n: [None] * len(rows) for n in needs}
    capturers = list(dict.fromkeys(NEEDS[n].capturer for n in needs))
    for idx in length_batches([len(r) for r in rows], batch_size):
        ids, mask = pad_batch([rows[i] for i in idx], pad_id)
        got: dict[str, Any] = {}
        with eval_mode(model), torch.no_grad():
            for capturer in capturers:
                got.update(capturer(inner, {"input_ids": ids.to(device), "attention_mask": mask.to(device)}))
        for name in needs:
            for row, i in enumerate(idx):
                value = NEEDS[name].select(got[name], batch=row, tokens=np.arange(len(rows[i])))
                out[name][i] = torch.as_tensor(value).float().cpu().numpy().astype(dtype)
    return out
