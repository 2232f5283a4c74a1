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
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results" / "answer_side_by_side.json"
FILLER = ROOT.parent / "shared" / "data" / "sst2" / "glue_SST-2" / "train.tsv"
ATTNFLOW_METHODS = ("input_gradients", "integrated_gradients", "attnlrp", "rollout")
TOOLS = (*ATTNFLOW_METHODS, "flashtrace")


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
        what = "timed (teacher-forced: not scored)" if meta["timing_only"] else "answered right and scored"
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
    ap.add_argument(
        "--timing-only",
        action="store_true",
        help="time and memory only: the expected answer is the generation, nothing is scored",
    )
    ap.add_argument(
        "--checkpoint", action="store_true", help="gradient methods: each block recomputed in the backward"
    )
    ap.add_argument(
        "--isolate",
        action="store_true",
        help="each tool and length in a process of its own, its whole peak resident set measured",
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
    if args.isolate:
        return isolated(args, tools, [int(n) for n in args.lengths.split(",")], argv)
    timing_only = args.shape is not None or args.timing_only
    if timing_only:
        tasks = ["retrieval"]
    model, tokenizer, name = load(args)
    from attnflow.answer import build_items, compare_tools
    from attnflow.compare.flashtrace import tracer

    filler = (
        [r.split("\t")[0] for r in args.filler.read_text().splitlines()[1:]] if "retrieval" in tasks else []
    )
    items = build_items(
        tasks, args.items, tokenizer=tokenizer, filler=filler, lengths=lengths, seed=args.seed
    )
    trace = (
        tracer(model, tokenizer, recompute_attention=args.flashtrace_recompute)
        if "flashtrace" in tools
        else None
    )
    rows, kept = compare_tools(
        model, tokenizer, items, tools, tracer=trace, device=args.device, full_curve=args.full_curve,
        steps=args.steps, budget_s=args.budget_s, timing_only=timing_only, checkpoint=args.checkpoint,
        on_row=lambda row: print(json.dumps(row), flush=True),
    )  # fmt: skip
    from attnflow.answer import summarise

    summary = summarise(rows)
    meta = {
        "command": " ".join(["python benchmarks/answer_side_by_side.py", *(argv if argv is not None else sys.argv[1:])]),
        "model": name, "device": args.device, "torch": torch.__version__, "flashtrace": metadata.version("flashtrace"), "load_before": os.getloadavg(),
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({os.cpu_count()} CPUs, {torch.backends.cpu.get_cpu_capability()})",
        "deletion": "not scored (timing only)" if timing_only else
        f"every count up to {args.full_curve} user tokens, else {args.steps} + 1 counts interpolated",
        "kept": kept, "seed": args.seed,
        "attention": {"attnflow": "sdpa", "flashtrace": "sdpa, recomputed" if args.flashtrace_recompute else "eager"}, "timing_only": timing_only,
    }  # fmt: skip
    import resource

    meta["process_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    result = {"meta": meta, "rows": rows, "summary": summary}
    from attnflow.io import write_json

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)  # atomically; NaN as null
    print(tables(summary, meta))
    return result


def isolated(args, tools: list[str], lengths: list[int], argv) -> dict:
    """One process per (tool, length), shortest first, timing only: its seconds and the process's
    whole peak resident set (model, libraries and all: what a memory budget holds); a tool stops
    at its first length that runs out of memory or past --budget-s."""
    import subprocess
    import tempfile

    rows = []
    for tool in tools:
        for n in lengths:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "r.json"
                cmd = [sys.executable, __file__, "--timing-only", "--tasks", "retrieval", "--lengths", str(n),
                       "--items", "1", "--methods", tool, "--device", args.device, "--out", str(out),
                       *(["--checkpoint"] if args.checkpoint else [])]  # fmt: skip
                done = subprocess.run(cmd, capture_output=True, text=True)
                got = json.loads(out.read_text()) if done.returncode == 0 and out.is_file() else None
            r = (got or {}).get("rows", [{}])[0]
            row = {"tool": tool, "checkpoint": args.checkpoint, "length": n, "prompt_tokens": r.get("prompt_tokens"), "seconds": r.get("seconds"),
                   "process_peak_bytes": got and got["meta"]["process_peak_bytes"],
                   "out_of_memory": bool(r.get("out_of_memory")) or got is None,
                   "error": None if got else done.stderr.strip().splitlines()[-1:]}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["out_of_memory"] or (row["seconds"] or 0) > args.budget_s:
                break
    import torch

    meta = {"command": " ".join(["python benchmarks/answer_side_by_side.py", *(argv if argv is not None else sys.argv[1:])]),
            "device_name": f"CPU ({os.cpu_count()} CPUs, {torch.backends.cpu.get_cpu_capability()})",
            "load_before": os.getloadavg(), "torch": torch.__version__}  # fmt: skip
    from attnflow.io import write_json

    write_json(args.out, {"meta": meta, "rows": rows})
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    main()
