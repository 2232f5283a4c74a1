"""The cost of the norm- and decomposition-based methods in the batched API, as a multiple of one
forward pass of the same model on the same batch (issue 56's target: ALTI and value zeroing at
most 3x), measured in one run, alternating.

    python benchmarks/decomposition_cost.py                       # MiniLM-SST2, 32 SST-2 dev sentences
    python benchmarks/decomposition_cost.py --batch 64 --rounds 5 --methods alti,value_zeroing
    python benchmarks/decomposition_cost.py --faithfulness 100      # + faithfulness beside IG's time

Per round: one plain forward (``model(**enc)`` under no_grad, the baseline) and, for each method,
``explain_texts(model, tokenizer, texts, methods=[method], batch_size=batch)`` (the user's call: one
capturing forward, the needs made and checked, the method). The medians over rounds are reported
with their ratio to the forward's median. Threads: ``BENCH_THREADS`` (default 1, so that a shared
machine's second core does not enter the ratios); the load average is printed before and after.
With ``--faithfulness N``: the first N dev sentences scored by every method, AttnLRP, integrated
gradients and input x gradient (`attnflow.compare.faithfulness_table`: AOPC comprehensiveness and
sufficiency with bootstrap intervals, seconds per sentence), against issue 56's target: the best
decomposition method's comprehensiveness within integrated gradients' interval or above, at <= 1/5
of its time. Writes benchmarks/results/decomposition_cost.json (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "decomposition_cost.json"
DEV = ROOT.parent / "shared" / "data" / "sst2" / "glue_SST-2" / "dev.tsv"
METHODS = ("raw", "attention_norm", "globenc", "alti", "value_zeroing", "decompx")
SCORED = (*METHODS, "rollout", "attnlrp")  # ranked in the faithfulness section, beside the comparators
COMPARATORS = ("integrated_gradients", "input_x_gradient")
TARGET = {"alti": 3.0, "value_zeroing": 3.0}


def table(result: dict) -> str:
    m = result["meta"]
    lines = [
        f"`{m['command']}`: {m['model']}, {m['batch']} sentences of at most {m['tokens']} tokens, "
        f"{m['threads']} thread(s), {m['cpu']}, median of {m['rounds']} rounds; load average "
        f"{' '.join(f'{x:.2f}' for x in m['load_before'])} before / {' '.join(f'{x:.2f}' for x in m['load_after'])} after.",
        "",
        "| call | median s | x forward | target |",
        "| --- | --- | --- | --- |",
        f"| forward (baseline) | {result['forward_s']:.3f} | 1.0 | |",
    ]
    for r in result["rows"]:
        target = TARGET.get(r["method"])
        met = (
            ""
            if target is None
            else (f"<= {target:g}x: " + ("met" if r["ratio"] <= target else "**not met**"))
        )
        lines.append(f"| {r['method']} | {r['seconds']:.3f} | {r['ratio']:.1f} | {met} |")
    if faith := result.get("faithfulness"):
        ig = next(r["seconds_per_text"] for r in faith if r["method"] == "integrated_gradients")
        lines += ["", f"Faithfulness on the first {faith[0]['n']} dev sentences (AOPC; 95 % bootstrap intervals):", "",
                  "| method | comprehensiveness ↑ | sufficiency ↓ | s / sentence | x IG's time |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
        for method in dict.fromkeys(r["method"] for r in faith):
            got = {r["metric"]: r for r in faith if r["method"] == method}
            cell = [
                f"{got[m]['mean']:.3f} [{got[m]['ci_low']:.3f}, {got[m]['ci_high']:.3f}]"
                for m in ("comprehensiveness", "sufficiency")
            ]
            t = got["comprehensiveness"]["seconds_per_text"]
            time_cells = "| |" if t is None or t != t else f"| {t:.3f} | {t / ig:.2f} |"
            lines.append(f"| {method} | {cell[0]} | {cell[1]} {time_cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="minilm-sst2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--faithfulness", type=int, default=0, help="sentences scored for faithfulness (0: none)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    from attnflow.hf.loading import load_model
    from attnflow.hf.text import explain_texts

    model, tokenizer = load_model(args.model)[:2]
    texts = [r.split("\t")[0] for r in DEV.read_text().splitlines()[1 : args.batch + 1]]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    methods = args.methods.split(",")
    load_before = os.getloadavg()

    def forward():
        with torch.no_grad():
            model(**enc)

    calls = {"forward": forward}
    for method in methods:
        calls[method] = lambda m=method: explain_texts(
            model, tokenizer, texts, methods=[m], batch_size=args.batch
        )
    for call in calls.values():  # warm-up: kernels, libraries, the first allocation of each size
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    forward_s = statistics.median(times["forward"])
    rows = [
        {"method": m, "seconds": statistics.median(times[m]), "ratio": statistics.median(times[m]) / forward_s,
         "all_seconds": times[m]}
        for m in methods
    ]  # fmt: skip
    meta = {
        "command": " ".join(["python benchmarks/decomposition_cost.py", *(argv if argv is not None else sys.argv[1:])]),
        "model": args.model, "batch": len(texts), "tokens": int(enc["input_ids"].shape[1]), "rounds": args.rounds,
        "threads": torch.get_num_threads(), "cpu": f"{os.cpu_count()} CPUs, {torch.backends.cpu.get_cpu_capability()}",
        "load_before": load_before, "load_after": os.getloadavg(), "torch": torch.__version__,
    }  # fmt: skip
    result = {"meta": meta, "forward_s": forward_s, "forward_all_s": times["forward"], "rows": rows}
    if args.faithfulness:
        from attnflow.compare.faithfulness import faithfulness_table

        lines = DEV.read_text().splitlines()[1 : args.faithfulness + 1]
        faith = faithfulness_table(
            model, tokenizer, [r.split("\t")[0] for r in lines], SCORED, comparators=COMPARATORS
        )
        result["faithfulness"] = faith.to_dict("records")
        meta["load_after"] = os.getloadavg()
    from attnflow.io import write_json

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)  # atomically; NaN as null
    print(table(result))
    return result


if __name__ == "__main__":
    main()
