"""Importance scores of many ragged samples: what the study's ``attribute`` stage computes.

Samples of similar length are padded into batches; every method of ``ATTRIBUTIONS`` is called the
same way, ``fn(model, input_ids, attention_mask, labels=labels, **options[method])``, and each
sample's scores are cut back to its own length (float64).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.batches import length_batches, pad_batch

__all__ = [
    "BLANK_POSITIONS",
    "BLANK_SWITCHES",
    "STUDY_KEYS",
    "attribute_samples",
    "blank_out_under_switches",
    "blank_switches",
    "gradient_settings",
    "method_options",
    "method_settings",
    "study_options",
    "switch_from_configured",
    "switched_blank_out",
]

#: Keys of the ``attribution`` config group that choose what the study computes, not options of a method.
STUDY_KEYS = ("methods", "switch_samples")

#: ``attribution.blank_positions``: the positions never blanked, besides the end markers.
BLANK_POSITIONS: dict[str, tuple[int, ...]] = {"all": (), "skip_cls": (0,)}

#: Blank-out's own switches, each flipped alone for the report's sensitivity table:
#: ``attribution.<key>`` -> {configured value: the value it is flipped to}.
BLANK_SWITCHES: dict[str, dict[Any, Any]] = {
    "blank_positions": {"all": "skip_cls", "skip_cls": "all"},
    "blank_token": {"unk": "pad", "pad": "unk", "mask": "unk"},
    "mask_blank": {True: False, False: True},
}


def attribute_samples(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    labels: Sequence[int],
    *,
    options: Mapping[str, Mapping[str, Any]],
    pad_id: int,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> dict[str, list[np.ndarray]]:
    """``{method: [(T_i,) scores]}`` for every method named in ``options`` (its keyword arguments).

    >>> def model(input_ids, attention_mask):  # logit 0 = number of id-5 tokens
    ...     n = ((input_ids == 5) & attention_mask.bool()).sum(-1).float()
    ...     return torch.stack([n, torch.zeros_like(n)], dim=-1)
    >>> out = attribute_samples(model, [[2, 5], [2, 5, 7]], [0, 0], pad_id=0,
    ...                         options={"blank_out": {"score": "logit"}})
    >>> [s.tolist() for s in out["blank_out"]]
    [[0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    from tqdm.auto import tqdm

    from . import ATTRIBUTIONS

    if unknown := sorted(set(options) - set(ATTRIBUTIONS)):
        raise ValueError(f"unknown importance score(s) {unknown}; known: {sorted(ATTRIBUTIONS)}")
    rows = [np.asarray(r) for r in input_ids]
    if not rows:
        raise ValueError("no samples to attribute")
    labels_all = np.asarray(labels)
    scores: dict[str, list[Any]] = {m: [None] * len(rows) for m in options}
    for idx in tqdm(
        length_batches([len(r) for r in rows], batch_size),
        desc="attribute",
        leave=False,
        disable=not progress,
    ):
        ids, mask = pad_batch([rows[i] for i in idx], pad_id)
        ids, mask = ids.to(device), mask.to(device)
        batch_labels = torch.as_tensor(labels_all[idx], dtype=torch.long, device=device)
        for method, kwargs in options.items():
            values = ATTRIBUTIONS[method](model, ids, mask, labels=batch_labels, **kwargs)  # (B, T)
            for row, i in enumerate(idx):
                scores[method][i] = values[row, : len(rows[i])].detach().double().cpu().numpy()
    return scores


def method_options(
    methods: Sequence[str],
    encoder: Any,
    *,
    blank_positions: str = "all",
    blank_token: str = "unk",
    mask_blank: bool = False,
    blank_target: str = "gold",
    blank_score: str = "prob",
    gradient_target: str = "p0_minus_p1",
    gradient_class: str | int = "gold",
    gradient_reduction: str = "abs_sum",
    batch_size: int = 256,
) -> dict[str, dict[str, Any]]:
    """Keyword arguments of each importance score in ``methods``, from the study's settings (the
    ``attribution`` config group and ``task.<name>.gradient_*``; the names are the config keys).

    ``blank_positions``: ``all`` blanks CLS like every token (the notebook that printed Tables 1-2),
    ``skip_cls`` never blanks it (the final notebook). End markers (``<eos>``, ``[SEP]``: the
    encoder's ``end_positions``) are never blanked and score 0, as the authors' ``<eos>``.
    ``blank_token`` names one of the encoder's special ids (pad / unk / mask); ``mask_blank`` also
    removes the blanked position from attention.
    """
    blank_ids = {"pad": encoder.pad_id, "unk": encoder.unk_id, "mask": encoder.mask_id}
    if blank_token not in blank_ids:
        raise ValueError(f"blank_token must be one of {sorted(blank_ids)}, got {blank_token!r}")
    if blank_positions not in BLANK_POSITIONS:
        raise ValueError(f"blank_positions must be one of {sorted(BLANK_POSITIONS)}, got {blank_positions!r}")
    every = {
        "blank_out": dict(
            blank_id=blank_ids[blank_token],
            pad_id=encoder.pad_id,
            mask_blank=mask_blank,
            target=blank_target,
            score=blank_score,
            skip_positions=BLANK_POSITIONS[blank_positions] + tuple(getattr(encoder, "end_positions", ())),
        ),
        "input_gradients": dict(
            target=gradient_target,
            target_class=int(gradient_class) if str(gradient_class).isdigit() else gradient_class,
            reduction=gradient_reduction,
        ),
    }
    if unknown := sorted(set(methods) - set(every)):
        raise ValueError(f"unknown importance score(s) {unknown}; known: {sorted(every)}")
    return {m: {**every[m], "batch_size": batch_size} for m in methods}


def method_settings(attribution: Mapping[str, Any]) -> dict[str, Any]:
    """The `attribution` config group without its :data:`STUDY_KEYS`: the blank-out settings and
    batch_size, as :func:`method_options` takes them."""
    return {k: v for k, v in attribution.items() if k not in STUDY_KEYS}


def gradient_settings(task_settings: Mapping[str, Any]) -> dict[str, Any]:
    """A task's `gradient_target` / `gradient_class` (``task.<name>``), as :func:`method_options` takes them."""
    return {k: task_settings[k] for k in ("gradient_target", "gradient_class")}


def study_options(
    attribution: Mapping[str, Any], task_settings: Mapping[str, Any], encoder: Any
) -> dict[str, dict[str, Any]]:
    """`method_options` of the study: the `attribution` config group (:func:`method_settings`)
    and the task's gradient settings (:func:`gradient_settings`)."""
    return method_options(
        list(attribution["methods"]),
        encoder,
        **gradient_settings(task_settings),
        **method_settings(attribution),
    )


def switched_blank_out(
    scores: Mapping[str, Sequence[np.ndarray]], settings: Mapping[str, Any]
) -> dict[str, tuple[str, Sequence[np.ndarray], bool]]:
    """Blank-out recomputed under each switch (``scores``, by the names of :func:`blank_switches`)
    as :func:`attnflow.metrics.tables.switch_frame` takes it: ``{"attribution.<name>": ("blank_out",
    scores, whether CLS was blanked under that switch)}``; names that are not switches of
    ``settings`` are left out.

    >>> out = switched_blank_out({"blank_positions=skip_cls": [np.zeros(2)]}, {"blank_positions": "all",
    ...     "blank_token": "unk", "mask_blank": False})
    >>> [(k, v[0], v[2]) for k, v in out.items()]
    [('attribution.blank_positions=skip_cls', 'blank_out', False)]
    """
    flips = blank_switches(settings)
    return {
        f"attribution.{name}": ("blank_out", values, flips[name]["blank_positions"] == "all")
        for name, values in scores.items()
        if name in flips
    }


def switch_from_configured(
    name: str, settings: Mapping[str, Any], configured: Sequence[np.ndarray]
) -> list[np.ndarray] | None:
    """The blank-out scores under switch ``name`` (of :func:`blank_switches`) when they follow from
    the configured pass ``configured`` without a model call; None when they need their own pass.

    Blank-out blanks each position alone: score(t) = |p(y | x) - p(y | x with t blanked)| depends on
    no other position's copy. So ``blank_positions`` flipped from ``all`` to ``skip_cls`` leaves every
    score but CLS's as configured, and CLS, now never blanked, scores 0 as skipped positions do.

    >>> switch_from_configured("blank_positions=skip_cls", {"blank_positions": "all", "blank_token": "unk",
    ...     "mask_blank": False}, [np.array([0.5, 0.25, 0.0])])
    [array([0.  , 0.25, 0.  ])]
    """
    flipped = blank_switches(settings)[name]
    if settings["blank_positions"] == "all" and flipped["blank_positions"] == "skip_cls":
        skipped = list(BLANK_POSITIONS["skip_cls"])  # (0,): CLS
        out = [np.array(s, copy=True) for s in configured]
        for s in out:
            s[skipped[: len(s)]] = 0.0
        return out
    return None


def blank_out_under_switches(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    labels: Sequence[int],
    *,
    settings: Mapping[str, Any],
    configured: Sequence[np.ndarray],
    encoder: Any,
    gradient: Mapping[str, Any],
    samples: Sequence[int] | None = None,
    **common: Any,
) -> dict[str, list[np.ndarray]]:
    """Blank-out under each switch of :func:`blank_switches` flipped alone (the report's sensitivity
    table), by switch name: derived from the configured pass ``configured`` where the scores follow
    from it (:func:`switch_from_configured`), else one :func:`attribute_samples` pass of its own.
    ``samples``: the positions of the samples to score, in that order (a seeded subset:
    ``attribution.switch_samples``; None: all). ``gradient``: the task's gradient_target /
    gradient_class; ``common``: attribute_samples' batch options (pad_id, batch_size, device, progress)."""
    if samples is not None:
        input_ids = [input_ids[i] for i in samples]
        labels = [labels[i] for i in samples]
        configured = [configured[i] for i in samples]
    out = {}
    for name, flipped in blank_switches(settings).items():
        derived = switch_from_configured(name, settings, configured)
        if derived is None:
            options = method_options(["blank_out"], encoder, **gradient, **flipped)
            derived = attribute_samples(model, input_ids, labels, options=options, **common)["blank_out"]
        out[name] = derived
    return out


def blank_switches(settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"<key>=<value>": settings with that one blank-out switch flipped}`` for every key of
    :data:`BLANK_SWITCHES` (``settings``: the ``attribution`` config keys of :func:`method_options`).

    >>> sorted(blank_switches({"blank_positions": "all", "blank_token": "unk", "mask_blank": False}))
    ['blank_positions=skip_cls', 'blank_token=pad', 'mask_blank=true']
    """
    out = {}
    for key, flip in BLANK_SWITCHES.items():
        value = flip[settings[key]]
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out[f"{key}={text}"] = {**settings, key: value}
    return out
