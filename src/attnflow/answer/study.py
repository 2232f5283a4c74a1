"""The answer-attribution comparison as one call, for the ``answer`` stage and the benchmark: every
tool on the same items of the same model, scored by the same metrics.

For each item (`attnflow.answer.tasks`) the model answers its chat prompt greedily
(`answer_target`); an item it answers wrong is counted and left out. Each tool then attributes the
answer's span to the user's tokens, timed alone (`attnflow.resources.measured`: seconds and peak
memory; the first call of each tool warms it up and is not kept), and the attribution is scored
(`item_scores`: RISE, MAS, RISE+AP of the guided deletion, recovery@10 % of the gold tokens).

Tools: the span methods of `span_attribution` (gradient methods through the fused attention
kernel, ``sdpa``; attention methods with sinks found per head and the uniform receptive field) and
``flashtrace`` (`attnflow.compare.flashtrace`, its default method, one hop). A tool slower than
``budget_s`` on an item, or out of memory, skips the longer lengths of that task.

Rows are tidy (one per item and tool; `attnflow.answer.compare`); `answer_tables` turns them into
the long summary (task, length, tool, score, paired, mean, low, high) and the flat metrics that the
stage logs to MLflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnflow.options import ANSWER_TOOLS

from .compare import PAIRED, SCORES, answer_target, item_scores, summarise
from .span import IG_STEPS, SPAN_METHODS, span_attribution

__all__ = [
    "KEPT_REASONS",
    "answer_tables",
    "compare_tools",
    "group_name",
    "run_meta",
    "save_answer_study",
    "tool_weights",
]

KEPT_REASONS = ("template", "wrong", "retokenized")  # why answer_target leaves an item out
SPAN_OPTIONS = {"rollout": {"sinks": "auto", "receptive_field": "uniform"},
                "raw": {"sinks": "auto", "receptive_field": "uniform"}}  # fmt: skip


def tool_weights(
    tool: str, model: Any, tokenizer: Any, item: Any, target: tuple, *, tracer: Any = None,
    device: Any = "cpu", ig_steps: int = IG_STEPS, checkpoint: bool = False,
) -> tuple[np.ndarray | None, float | None, int | None]:  # fmt: skip
    """(the user tokens' weights (len(user),), seconds, peak bytes) of one tool on one item's
    ``target`` (`answer_target`); (None, None, None) when it ran out of memory. ``checkpoint``: the
    gradient methods recompute each block in the backward (`span_attribution`)."""
    from attnflow.resources import measured

    ids, user, generated, span = target
    if tool == "flashtrace":
        from attnflow.compare.flashtrace import flashtrace_weights

        if tracer is None:
            raise ValueError("flashtrace needs its tracer (attnflow.compare.flashtrace.tracer)")
        text = tokenizer.decode(generated)
        return measured(device, lambda: flashtrace_weights(tracer, item.prompt, text, span, len(user)))
    if tool not in SPAN_METHODS:
        raise ValueError(f"unknown tool {tool!r}; the tools are {', '.join(ANSWER_TOOLS)}")
    kwargs = {"span": span, "attention": "sdpa", "ig_steps": ig_steps, "checkpoint": checkpoint,
              **SPAN_OPTIONS.get(tool, {})}  # fmt: skip
    got, seconds, peak = measured(
        device, lambda: span_attribution(model, tokenizer, ids, generated, tool, **kwargs)
    )
    return (None if got is None else got[user]), seconds, peak


def compare_tools(
    model: Any, tokenizer: Any, items: Sequence[Any], tools: Sequence[str], *, tracer: Any = None,
    device: Any = "cpu", ig_steps: int = IG_STEPS, full_curve: int = 96, steps: int = 24,
    budget_s: float | None = None, timing_only: bool = False, on_row: Callable[[dict], None] | None = None,
    checkpoint: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:  # fmt: skip
    """(rows, kept): one row per scored item and tool (module docstring), and per "task/length"
    the items built, kept and left out by reason. ``tracer``: FlashTrace's (None: made here when
    ``flashtrace`` is a tool). ``timing_only``: the answer is taken as given (random weights) and
    nothing is scored, only timed. ``on_row`` sees each row as it is made."""
    if unknown := sorted(set(tools) - set(ANSWER_TOOLS)):
        raise ValueError(f"unknown tool(s) {', '.join(unknown)}; the tools are {', '.join(ANSWER_TOOLS)}")
    if tracer is None and "flashtrace" in tools:
        from attnflow.compare.flashtrace import tracer as flashtrace_tracer

        tracer = flashtrace_tracer(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows: list[dict[str, Any]] = []
    kept: dict[str, dict[str, int]] = {}
    slow: set[tuple[str, str, int]] = set()
    warm: set[str] = set()
    call = dict(tracer=tracer, device=device, ig_steps=ig_steps, checkpoint=checkpoint)
    lengths = {task: _lengths(items, task) for task in {item.task for item in items}}
    for k, item in enumerate(items):
        length = item.meta.get("length")
        group = kept.setdefault(f"{item.task}/{length}", {"built": 0, "kept": 0})
        group["built"] += 1
        target = answer_target(model, tokenizer, item, pad_id=pad, teacher_forced=timing_only)
        if isinstance(target, str):  # why the item is not scored
            group[target] = group.get(target, 0) + 1
            continue
        group["kept"] += 1
        ids, user, _, span = target
        above = [n for n in lengths[item.task] if length is not None and n > length]  # skipped once too slow
        for tool in tools:
            if length is not None and (tool, item.task, length) in slow:
                continue
            if tool not in warm:  # the first call loads kernels and libraries: not timed
                tool_weights(tool, model, tokenizer, item, target, **call)
                warm.add(tool)
            w, seconds, peak = tool_weights(tool, model, tokenizer, item, target, **call)
            row = {"item": k, "task": item.task, "length": length, "tool": tool, "prompt_tokens": len(ids),
                   "user_tokens": len(user), "span": list(span)}  # fmt: skip
            longer = {(tool, item.task, n) for n in above}
            if w is None:
                row["out_of_memory"] = True
                slow |= longer
            else:
                row.update(seconds=seconds, peak_bytes=float(peak), finite=bool(np.isfinite(w).all()))
                if budget_s is not None and seconds > budget_s:
                    slow |= longer
                if not timing_only:
                    n_steps = None if len(user) <= full_curve else steps
                    row.update(item_scores(model, tokenizer, item, target, w, pad_id=pad, steps=n_steps))
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows, kept


def _lengths(items: Sequence[Any], task: str) -> set[int]:
    return {n for i in items if i.task == task and (n := i.meta.get("length")) is not None}


def run_meta(device: Any, *, model: str, full_curve: int, steps: int, reference: str) -> dict[str, Any]:
    """What a reader needs beside the numbers: the model, the machine (device, CPU kind, threads,
    load), torch's and FlashTrace's versions, how the deletion was scored, the reference tool."""
    import os
    from importlib import metadata

    import torch

    try:
        flashtrace = metadata.version("flashtrace")
    except metadata.PackageNotFoundError:
        flashtrace = None
    cuda = str(device).startswith("cuda")
    return {
        "model": model, "device": str(device), "torch": torch.__version__, "flashtrace": flashtrace,
        "machine": torch.cuda.get_device_name() if cuda else f"CPU ({torch.backends.cpu.get_cpu_capability()})",
        "threads": torch.get_num_threads(), "load": [round(x, 2) for x in os.getloadavg()],
        "deletion": f"every count up to {full_curve} user tokens, else {steps} + 1 counts interpolated",
        "reference": reference,
    }  # fmt: skip


def group_name(task: str, length: Any) -> str:
    """A task's name with its prompt length where it has one: ``retrieval_256``, ``multihop``."""
    return task if length is None or length != length else f"{task}_{int(length)}"


def answer_tables(
    rows: Sequence[dict[str, Any]], kept: dict[str, dict[str, int]], *, reference: str, n_boot: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """(rows, summary, metrics): the rows as a table; the long summary, one row per (task, length,
    tool, score, paired) with the bootstrap (mean, low, high) over items (paired: the tool's
    difference to ``reference`` on the items both scored), ``items`` and the task's ``built`` /
    ``kept`` counts; and the metrics, nested as {group: {tool: {score: mean}}, group: {built, kept}}
    (`group_name`; a paired score is ``{score}_minus_{reference}``), which MLflow logs by their
    dotted paths."""
    table = pd.DataFrame(list(rows))
    out = []
    for r in summarise(rows, reference=reference, n_boot=n_boot, seed=seed):
        counts = kept.get(f"{r['task']}/{r['length']}", {})
        base = {"task": r["task"], "length": r["length"], "tool": r["tool"], "items": r["items"],
                "out_of_memory": r["out_of_memory"], "built": counts.get("built", 0), "kept": counts.get("kept", 0)}  # fmt: skip
        for score in SCORES:
            out.append(
                {
                    **base,
                    "score": score,
                    "paired": False,
                    **dict(zip(("mean", "low", "high"), r[score], strict=True)),
                }
            )
            if score in PAIRED and f"{score}_minus_{reference}" in r:
                ci = r[f"{score}_minus_{reference}"]
                out.append(
                    {
                        **base,
                        "score": score,
                        "paired": True,
                        **dict(zip(("mean", "low", "high"), ci, strict=True)),
                    }
                )
    summary = pd.DataFrame(out, columns=["task", "length", "tool", "score", "paired", "mean", "low", "high",
                                         "items", "out_of_memory", "built", "kept"])  # fmt: skip
    metrics: dict[str, Any] = {}
    for s in summary.itertuples():
        if np.isfinite(s.mean):
            score = s.score + (f"_minus_{reference}" if s.paired else "")
            metrics.setdefault(group_name(s.task, s.length), {}).setdefault(s.tool, {})[score] = float(s.mean)
    for group, counts in kept.items():
        task, length = group.split("/")
        node = metrics.setdefault(group_name(task, None if length == "None" else int(length)), {})
        node.update(built=counts.get("built", 0), kept=counts.get("kept", 0))
    return table, summary, metrics


def save_answer_study(
    rows: Sequence[dict[str, Any]], kept: dict[str, dict[str, int]], folder: Path, *, reference: str,
    n_boot: int, seed: int, meta: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """Write ``folder``/rows.parquet, summary.parquet and summary.json (the metrics, the items
    kept per task and ``meta``: model, device, deletion, reference) together, and return the metrics."""
    import json

    from attnflow.io import write_together

    table, summary, metrics = answer_tables(rows, kept, reference=reference, n_boot=n_boot, seed=seed)
    payload = {"metrics": metrics, "kept": kept, "meta": meta}
    folder = Path(folder)
    write_together({
        folder / "rows.parquet": table.to_parquet(index=False),
        folder / "summary.parquet": summary.to_parquet(index=False),
        folder / "summary.json": json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n",
    })  # fmt: skip
    return metrics
