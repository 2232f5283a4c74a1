"""Answer attribution side by side with FlashTrace: the same model, the same items, the same metrics,
one run. A table per task (and prompt length) with RISE, MAS, recovery@10 %, seconds per item and
peak memory, each with a bootstrap interval over items, and each attnflow method's paired
difference against FlashTrace.

    pip install --no-deps -r requirements-bench.txt                  # FlashTrace 0.1.1 and its imports
    python benchmarks/answer_side_by_side.py                         # SmolLM2-135M-Instruct, CPU
    python benchmarks/answer_side_by_side.py --tasks retrieval --lengths 512,1024 --items 12
    python benchmarks/answer_side_by_side.py --shape 8b --device cuda --lengths 5000,8192,16384,32768

Items (`attnflow.answer.tasks`): arithmetic and two-fact ("multihop") questions from templates, and
retrieval of a code placed at a random depth in SST-2 training sentences (the data mirror) of about
``--lengths`` tokens. The prompt is put as FlashTrace puts it with ``use_chat_template=True``: the
user turn "Context: {prompt}\\n\\n\\nQuery: " in the model's chat template; both tools attribute to
the user's text only and delete only it (`protect`: the template's tokens). The model answers
greedily (at most 32 tokens); an item is kept when the expected answer appears in the generation as
a word (kept / built counts are reported). The explained span is that occurrence's tokens; the
generated tokens before it are context (FlashTrace's ``reasoning_span``, attnflow's ``span``).

Methods: attnflow's `span_attribution` (input gradients, integrated gradients, AttnLRP through
fused attention, rollout with sinks) and FlashTrace (``FlashTrace.trace``, its default method, one
hop; eager attention, which it reads, unless ``--flashtrace-recompute``). Metrics
(`attnflow.answer`): RISE and MAS of a guided deletion of the user's tokens (every deletion count
up to ``--full-curve`` deletable tokens, else ``--steps`` + 1 counts and linear interpolation,
named in the table), recovery@10 % of the gold source tokens. Seconds: the attribution call alone;
peak: the resident set's largest growth during it (polled every 2 ms; CUDA: the device's peak
allocation above what was held before).

``--shape`` (8b, 1b, tiny; `benchmarks/model_scale.py`) uses a random-weight Llama of that shape
with SmolLM2's tokenizer: no item is checked for correctness and no deletion is scored, only time
and memory on retrieval prompts of each length (what the issue asks of a lent GPU). Writes
benchmarks/results/answer_side_by_side.json (``--out``) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from long_inputs import Peak  # noqa: E402  (a sibling benchmark: the resident-set poller)

RESULTS = ROOT / "benchmarks" / "results" / "answer_side_by_side.json"
FILLER = ROOT.parent / "shared" / "data" / "sst2" / "glue_SST-2" / "train.tsv"
ATTNFLOW_METHODS = ("input_gradients", "integrated_gradients", "attnlrp", "rollout")
TOOLS = (*ATTNFLOW_METHODS, "flashtrace")


def flashtrace_module():
    """``flashtrace``, importable where its unused imports are absent: its package imports spacy
    (sentence splitting) and wordfreq (a word-frequency weight) at module level, neither used by
    ``FlashTrace.trace``; where they are missing (the GPU image), stand-ins that raise on use."""
    import importlib.util

    def raising(name):
        def call(*args, **kwargs):
            raise RuntimeError(f"{name} is a stand-in here (not installed): FlashTrace.trace does not use it")

        return call

    if importlib.util.find_spec("wordfreq") is None:
        sys.modules["wordfreq"] = types.SimpleNamespace(zipf_frequency=raising("wordfreq"))
    if importlib.util.find_spec("spacy") is None:

        class _Blank:
            def __init__(self):
                self.pipe_names: list[str] = []

            def add_pipe(self, *args, **kwargs):
                self.pipe_names = [*self.pipe_names, args[0] if args else "pipe"]

            def __call__(self, text):
                raise RuntimeError("spacy is a stand-in here: FlashTrace.trace does not split sentences")

        def load(name):
            raise OSError(name)

        language = types.SimpleNamespace(Language=types.SimpleNamespace(component=lambda name: lambda f: f))
        sys.modules["spacy"] = types.SimpleNamespace(load=load, blank=lambda lang: _Blank())
        sys.modules["spacy.language"] = language
        sys.modules["spacy.tokens"] = types.SimpleNamespace(Doc=object)
    import flashtrace

    return flashtrace


def measured(device: str, call):
    """(result, seconds, peak bytes) of ``call()``; out of memory is (None, None, None)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    try:
        with Peak() as peak:
            got = call()
            if device == "cuda":
                torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        return None, None, None
    extra = torch.cuda.max_memory_allocated() - held if device == "cuda" else peak.extra
    return got, peak.seconds, extra


def attribute(tool, model, tokenizer, tracer, ids, generated, span, prompt, user, device):
    """The user tokens' weights (len(user),) by one tool, with its seconds and peak."""
    from attnflow.answer import span_attribution
    from attnflow.compare.flashtrace import flashtrace_weights

    if tool == "flashtrace":
        text = tokenizer.decode(generated)
        return measured(device, lambda: flashtrace_weights(tracer, prompt, text, span, len(user)))
    kwargs = {"span": span, "attention": "sdpa"}  # AttnLRP through the fused attention kernel
    if tool == "rollout":
        kwargs.update(sinks="auto", receptive_field="uniform")
    got, seconds, peak = measured(
        device, lambda: span_attribution(model, tokenizer, ids, generated, tool, **kwargs)
    )
    return (None if got is None else got[user]), seconds, peak


def _fmt(ci, scale=1.0, digits=3) -> str:
    m, lo, hi = (x * scale for x in ci)
    if not np.isfinite(m):
        return ""
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def tables(summary: list[dict], meta: dict) -> str:
    lines = [
        f"`{meta['command']}` — {meta['model']}, {meta['device_name']}, torch {meta['torch']}, "
        f"load {meta['load_before'][0]:.2f}; deletion: {meta['deletion']}.",
        "",
    ]
    for task, length in sorted({(r["task"], r["length"]) for r in summary}, key=lambda g: (g[0], g[1] or 0)):
        kept = meta["kept"].get(f"{task}/{length}", {})
        head = f"{task}" + (f", {length:,} tokens" if length else "")
        what = "timed (random weights: not scored)" if meta["timing_only"] else "answered right and scored"
        lines += [f"**{head}** — {kept.get('kept', '?')} of {kept.get('built', '?')} items {what}", "",
                  "| method | RISE ↓ | MAS ↓ | recovery@10 % ↑ | s / item | peak MB | ΔRISE vs FT | ΔMAS vs FT | Δs vs FT |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for r in (r for r in summary if r["task"] == task and r["length"] == length):
            oom = f" ({r['out_of_memory']} out of memory)" if r["out_of_memory"] else ""
            lines.append(
                f"| {r['tool']}{oom} | {_fmt(r['rise'])} | {_fmt(r['mas'])} | {_fmt(r['recovery@10%'])} | "
                f"{_fmt(r['seconds'], digits=2)} | {_fmt(r['peak_bytes'], 1 / 2**20, 0)} | "
                f"{_fmt(r.get('rise_minus_flashtrace', (np.nan,) * 3))} | {_fmt(r.get('mas_minus_flashtrace', (np.nan,) * 3))} | "
                f"{_fmt(r.get('seconds_minus_flashtrace', (np.nan,) * 3), digits=2)} |"
            )
        lines.append("")
    return "\n".join(lines)


def load(args):
    """(model, tokenizer, name): SmolLM2 (the packaged LM) or a random-weight Llama of --shape with
    SmolLM2's tokenizer (or the tokenizer folder ``--tokenizer``)."""
    import torch

    if args.shape is None:
        from attnflow.hf.loading import load_model

        lm, tokenizer = load_model("smollm2")[:2]
        return lm.to(args.device).eval(), tokenizer, "SmolLM2-135M-Instruct"
    from model_scale import build
    from transformers import AutoTokenizer

    from attnflow.models.names import resolve_lm

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or resolve_lm("smollm2"))
    model = build(args.shape, args.device, getattr(torch, args.dtype), min_vocab=len(tokenizer))
    return model, tokenizer, f"random-weight Llama ({args.shape} shape, {args.dtype}), SmolLM2's tokenizer"


def main(argv: list[str] | None = None) -> dict:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="arithmetic,multihop,retrieval")
    ap.add_argument("--lengths", default="256,512", help="retrieval prompt tokens, comma-separated")
    ap.add_argument("--items", type=int, default=16, help="items built per task (and length)")
    ap.add_argument("--methods", default=",".join(TOOLS))
    ap.add_argument("--steps", type=int, default=24, help="deletion counts scored past --full-curve tokens")
    ap.add_argument("--full-curve", type=int, default=96, help="every deletion count up to this many tokens")
    ap.add_argument("--flashtrace-recompute", action="store_true", help="FlashTrace's recompute_attention")
    ap.add_argument(
        "--shape", default=None, help="a random-weight Llama (model_scale.py): time and memory only"
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--budget-s", type=float, default=300.0, help="a method slower than this skips longer inputs"
    )
    ap.add_argument("--tokenizer", default=None, help="with --shape: a tokenizer folder (default SmolLM2's)")
    ap.add_argument("--filler", type=Path, default=FILLER, help="SST-2's train.tsv: the retrieval filler")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    tools = args.methods.split(",")
    if unknown := sorted(set(tools) - set(TOOLS)):
        ap.error(f"--methods: unknown {', '.join(unknown)}; the methods are {', '.join(TOOLS)}")
    from attnflow.answer import TASKS

    tasks, lengths = args.tasks.split(","), [int(n) for n in args.lengths.split(",")]
    if unknown := sorted(set(tasks) - set(TASKS)):
        ap.error(f"--tasks: unknown {', '.join(unknown)}; the tasks are {', '.join(TASKS)}")
    timing_only = args.shape is not None
    if timing_only:
        tasks = ["retrieval"]
    model, tokenizer, name = load(args)
    flashtrace_module()  # importable on an image without its unused imports
    from attnflow.compare.flashtrace import tracer as make_tracer

    tracer = make_tracer(model, tokenizer, recompute_attention=args.flashtrace_recompute)
    from attnflow.answer import answer_target, build_items, item_scores

    filler = (
        [r.split("\t")[0] for r in args.filler.read_text().splitlines()[1:]] if "retrieval" in tasks else []
    )
    items = build_items(
        tasks, args.items, tokenizer=tokenizer, filler=filler, lengths=lengths, seed=args.seed
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows, kept, slow, warm = [], {}, set(), set()
    for k, item in enumerate(items):
        length = item.meta.get("length")
        group = kept.setdefault(f"{item.task}/{length}", {"built": 0, "kept": 0})
        group["built"] += 1
        target = answer_target(model, tokenizer, item, pad_id=pad, teacher_forced=timing_only)
        if isinstance(target, str):  # why the item is not scored
            group[target] = group.get(target, 0) + 1
            continue
        group["kept"] += 1
        ids, user, generated, span = target
        call = (model, tokenizer, tracer, ids, generated, span, item.prompt, user, args.device)
        for tool in tools:
            if (tool, length) in slow:
                continue
            if tool not in warm:  # the first call of each tool loads kernels and libraries: not timed
                attribute(tool, *call)
                warm.add(tool)
            w, seconds, peak = attribute(tool, *call)
            row = {"item": k, "task": item.task, "length": length, "tool": tool, "prompt_tokens": len(ids),
                   "user_tokens": len(user), "span": list(span)}  # fmt: skip
            if w is None:
                row["out_of_memory"] = True
                slow |= {(tool, n) for n in lengths if length is not None and n >= length}
            else:
                row.update(seconds=seconds, peak_bytes=float(peak), finite=bool(np.isfinite(w).all()))
                if seconds > args.budget_s:
                    slow |= {(tool, n) for n in lengths if length is not None and n > length}
                if not timing_only:
                    steps = None if len(user) <= args.full_curve else args.steps
                    row.update(item_scores(model, tokenizer, item, target, w, pad_id=pad, steps=steps))
            rows.append(row)
            print(json.dumps(row), flush=True)
    from attnflow.answer import summarise

    summary = summarise(rows)
    meta = {
        "command": " ".join(["python benchmarks/answer_side_by_side.py", *(argv if argv is not None else sys.argv[1:])]),
        "model": name, "device": args.device, "torch": torch.__version__, "flashtrace": metadata.version("flashtrace"), "load_before": os.getloadavg(),
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({os.cpu_count()} CPUs, {torch.backends.cpu.get_cpu_capability()})",
        "deletion": "not scored (random weights)" if timing_only else
        f"every count up to {args.full_curve} user tokens, else {args.steps} + 1 counts interpolated",
        "kept": kept, "seed": args.seed,
        "attention": {"attnflow": "sdpa", "flashtrace": "sdpa, recomputed" if args.flashtrace_recompute else "eager"}, "timing_only": timing_only,
    }  # fmt: skip
    result = {"meta": meta, "rows": rows, "summary": summary}
    from attnflow.io import write_json

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)  # atomically; NaN as null
    print(tables(summary, meta))
    return result


if __name__ == "__main__":
    main()
