"""The performance tables of README.md, docs/performance.md and docs/long-inputs.md, rendered
from benchmarks/results/.

    python benchmarks/tables.py           # rewrite the tables between their markers
    python benchmarks/tables.py --check   # exit 1 when a table differs from the results (a test runs this)

Each table sits between ``<!-- benchmarks:NAME -->`` and ``<!-- /benchmarks:NAME -->``: ``flow``
from ``flow_speed.json`` (every figure as a ratio against the baseline timed in the same run),
``cold`` from ``cold_start.json``, ``long`` (docs/long-inputs.md only) from ``long_inputs.json`` and
``generation`` (the same page) from ``long_generation.json`` (written by the archived
``long_generation.py``: results/ARCHIVE.md), ``scale`` (the same page) from ``model_scale*.json``,
``answer``, ``answer_longest`` and ``answer_gpu`` (docs/answer-attribution.md) from ``answer_side_by_side*.json`` and
``decomposition`` (docs/performance.md) from ``decomposition_cost.json`` (the tables those
benchmarks print, from the same functions).
The numbers are never typed by hand, so the documents say what the last committed run measured.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the sibling benchmarks whose table functions are reused
RESULTS = ROOT / "benchmarks" / "results"
# Each document and the tables it holds.
DOCUMENTS = {
    ROOT / "README.md": ("flow", "cold"),
    ROOT / "docs" / "performance.md": ("flow", "cold", "decomposition"),
    ROOT / "docs" / "long-inputs.md": ("long", "generation", "scale"),
    ROOT / "docs" / "answer-attribution.md": ("answer", "answer_longest", "answer_gpu"),
}


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def flow_table(result: dict) -> str:
    """The flow_speed.json run: its command, machine and load, then one row per figure."""
    cpu = f"{result['cpu']}, " if "cpu" in result else ""  # recorded since 2026-11-27
    lines = [
        f"`{result['command']}`, {cpu}{result['cpus']} CPUs, {result['threads_setting']}; load average "
        f"{result['load_average_before']} before / {result['load_average_after']} after.",
        "",
        "| figure | ours | baseline | baseline's | x faster | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        met = "" if r["met"] is None else ("met" if r["met"] else "**not met**")
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.1f}"
        lines.append(
            f"| {r['figure']} | {_num(r['ours'])} {r['unit']} | {r['baseline']} | {_num(r['base'])} | {ratio} | {met} |"
        )
    return "\n".join(lines)


def cold_table(result: dict) -> str:
    """The cold_start.json run: the first explanation of a fresh install, warm, and the floor."""
    met = "met" if result["cold_met"] else "**not met**"
    return "\n".join(
        [
            f"`{result['command']}`, {result['cpus']} CPUs, load average {result['load_average']} after "
            f"the runs; medians of {len(result['cold_runs'])} runs.",
            "",
            "| run | seconds | target |",
            "| --- | --- | --- |",
            f"| cold: fresh read-only install, first run | {result['cold_s']:.2f} | <= {result['target_cold_s']:g} s: {met} |",
            f"| warm: the same install again | {result['warm_s']:.2f} | |",
            f"| floor: import torch + transformers, load MiniLM, exit | {result['import_and_model_load_s']:.2f} | |",
        ]
    )


def long_table(result: dict) -> str:
    """The long_inputs.json run: raw/rollout speed, extra peak memory against depth, SmolLM2 by length."""
    rows = result["rows"]
    meta = result["meta"]
    lines = [
        f"`python benchmarks/long_inputs.py`, device {meta['device']}, load average {_load(meta.get('load_before'))} "
        f"before / {_load(meta.get('load_after'))} after; a worker past {meta['cap_gb']:g} GB is stopped.",
        "",
    ]
    speed = [r for r in rows if r["kind"] == "speed"]
    if speed:
        lines += [
            "| float32 torch vs today's float64 numpy | shape | numpy float64 | torch float32 | x faster | target |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in speed:
            met = "met" if r["speedup"] >= 1.8 else "**not met**"
            lines.append(
                f"| {r['path']} | {' x '.join(map(str, r['shape']))} | {r['numpy_float64_s']:.3f} s | "
                f"{r['torch_float32_s']:.3f} s | {r['speedup']:.2f} | >= 1.8: {met} |"
            )
        lines.append("")
    depth = {(r["size"], r["path"]): r for r in rows if r["kind"] == "depth" and "extra_peak_bytes" in r}
    if depth:
        lines += [
            "| tiny Llama, 32 heads, 768 tokens, rollout | layers | extra peak | x the float32 [L,H,T,T] | seconds |",
            "| --- | --- | --- | --- | --- |",
        ]
        for (size, path), r in sorted(depth.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            lines.append(
                f"| {path} | {size} | {r['extra_peak_bytes'] / 2**20:,.0f} MB | "
                f"{r['extra_peak_bytes'] / r['attentions_f32_bytes']:.2f} | {r['seconds']:.1f} |"
            )
        lines.append("")
    lm = [r for r in rows if r["kind"] == "smollm2"]
    if lm:
        lines += [
            "| SmolLM2-135M, last token | tokens | seconds | extra peak | process peak |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [_worker_row(r, f"{r.get('extra_peak_bytes', 0) / 2**30:.2f} GB") for r in _by_path(lm)]
        fits = {}
        for r in lm:
            if "seconds" in r:
                fits[r["path"]] = max(fits.get(r["path"], 0), r["size"])
        longest = ", ".join(f"{path} {n:,}" for path, n in sorted(fits.items()))
        lines += ["", f"Longest input within {meta['cap_gb']:g} GB per path (tokens): {longest}."]
    return "\n".join(lines).rstrip()


def generation_table(result: dict) -> str:
    """The long_generation.json run: explain_generation captured vs streamed, by prompt length."""
    meta = result["meta"]
    lines = [
        f"`python benchmarks/long_generation.py` (archived: benchmarks/results/ARCHIVE.md), {meta['cpus']} CPUs, load average {_load(meta.get('loadavg_start'))} "
        f"before / {_load(meta.get('loadavg_end'))} after; a worker past {meta['cap_gb']:g} GB is stopped.",
        "",
        "| SmolLM2-135M, 8 generated tokens, raw + rollout, sinks auto | prompt tokens | seconds | extra peak | process peak |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        _worker_row(r, f"{r.get('extra_peak_bytes', 0) / 2**20:,.0f} MB") for r in _by_path(result["rows"])
    ]
    return "\n".join(lines)


def _by_path(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["path"], r["size"]))


def _worker_row(r: dict, extra: str) -> str:
    """One measurement of a worker process (long_inputs.run_worker, long_generation.run_worker):
    stopped over the memory cap, failed, or its time, extra peak (`extra`, formatted) and process peak."""
    if "over_cap_gb" in r:
        return f"| {r['path']} | {r['size']:,} | | over {r['over_cap_gb']:g} GB | stopped |"
    if "error" in r:
        return f"| {r['path']} | {r['size']:,} | failed | | |"
    return f"| {r['path']} | {r['size']:,} | {r['seconds']:.1f} | {extra} | {r['process_peak_bytes'] / 2**30:.2f} GB |"


def _load(load: list[float] | None) -> str:
    return "n/a" if not load else " ".join(f"{x:.2f}" for x in load)


def scale_table(runs: list[dict], before: list[dict]) -> str:
    """The model_scale.py runs (each its own table), and the rollout rows measured before the GPU
    block size (``before``: the rows a killed run printed)."""
    from model_scale import table

    parts = [table(run["rows"], run["meta"]) for run in runs]
    if before:
        rows = ", ".join(f"{r['tokens']:,} tokens {r['seconds']:.1f} s" for r in before)
        parts.append(f"Before the GPU block size (16 MiB blocks on the GPU too), rollout with sinks: {rows}.")
    return "\n\n".join(parts)


def answer_table(
    result: dict, extra_rows: list[dict] | None = None, extra_note: str = "", extra_built: int | str = "?"
) -> str:
    """An answer_side_by_side.py run as it prints it; ``extra_rows``: the rows an earlier run on the
    same machine printed before its process ended (summarised with these; its groups' counts are
    the items it scored, of ``extra_built``), described by ``extra_note``."""
    from answer_side_by_side import tables

    from attnflow.answer import summarise

    rows = [*(extra_rows or []), *result["rows"]]
    meta = dict(result["meta"])
    scored: dict[str, set] = {}
    for r in extra_rows or []:
        scored.setdefault(f"{r['task']}/{r['length']}", set()).add(r["item"])
    meta["kept"] = {**{k: {"kept": len(v), "built": extra_built} for k, v in scored.items()}, **meta["kept"]}
    text = tables(summarise(rows), meta)
    return text + (f"\n{extra_note}\n" if extra_rows else "")


def longest_table(result: dict, extra_rows: list[dict], extra_note: str, budget: float = 8 * 2**30) -> str:
    """The --isolate run: per tool and length the seconds and the process's peak; ``extra_rows``
    the rows a --checkpoint run printed before it was stopped (``extra_note`` says how); the longest
    prompt each ran within ``budget`` bytes."""
    meta = result["meta"]
    lines = [f"`{meta['command']}` — {meta['device_name']}, torch {meta['torch']}, load {meta['load_before'][0]:.2f}.", "",
             "| tool | tokens | s / item | process peak GiB |", "| --- | --- | --- | --- |"]  # fmt: skip
    rows = [{**r, "tool": r["tool"] + (" (checkpointed)" if r.get("checkpoint") else "")}
            for r in [*result["rows"], *extra_rows]]  # fmt: skip
    for r in rows:
        peak = "out of memory" if r["out_of_memory"] else f"{r['process_peak_bytes'] / 2**30:.2f}"
        seconds = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
        lines.append(f"| {r['tool']} | {r['prompt_tokens'] or r['length']:,} | {seconds} | {peak} |")
    best = {}
    for r in rows:
        if not r["out_of_memory"] and r["process_peak_bytes"] <= budget:
            best[r["tool"]] = max(best.get(r["tool"], 0), r["prompt_tokens"])
    lines += ["", "Longest prompt within 8 GiB: " + ", ".join(f"{t} {n:,} tokens" for t, n in best.items()) + ".",
              "", extra_note]  # fmt: skip
    return "\n".join(lines)


def decomposition_table(result: dict) -> str:
    """The decomposition_cost.py run, as it prints it."""
    from decomposition_cost import table

    return table(result)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rendered() -> dict[str, str]:
    """Table name -> its markdown, from the committed results."""
    read = lambda name: json.loads((RESULTS / name).read_text(encoding="utf-8"))  # noqa: E731
    return {
        "scale": scale_table(
            [read("model_scale_rollout.json"), read("model_scale.json")],
            _jsonl(RESULTS / "model_scale_rollout_before.jsonl"),
        ),
        "answer": answer_table(
            read("answer_side_by_side.json"),
            _jsonl(RESULTS / "answer_side_by_side_short.jsonl"),
            "The arithmetic, multihop and 256-token rows come from an earlier run on the same machine, "
            "`python benchmarks/answer_side_by_side.py --tasks arithmetic,multihop,retrieval --lengths 256,512 "
            "--items 24` (24 items built per task and length), which stopped at its 71st item: a prompt whose "
            'first token merged with the chat template\'s (now left out as "template"; two of the 256-token '
            "items). Its rows are those it printed; the 512-token rows are the run above.",
            extra_built=24,
        ),
        "decomposition": decomposition_table(read("decomposition_cost.json")),
        "answer_longest": longest_table(
            read("answer_longest_cpu.json"),
            _jsonl(RESULTS / "answer_longest_cpu_checkpoint.jsonl"),
            "The checkpointed rows are those `python benchmarks/answer_side_by_side.py --isolate --checkpoint "
            "--lengths 2048,4096,8192,16384 --methods attnlrp,input_gradients --budget-s 900` printed, run right "
            "after the run above on the same machine; it was stopped after 17 minutes in AttnLRP's 16,384-token "
            "process (to free the machine for the study), before its input-gradient rows.",
        ),
        "answer_gpu": answer_table(
            read("answer_side_by_side_8b.json"),
            _jsonl(RESULTS / "answer_side_by_side_8b_5000.jsonl"),
            "The 5,000-token rows come from an earlier run on the same machine (rollout among its "
            "methods), whose process the host stopped, out of memory, when rollout's classic capture "
            "reached that length; the run above left rollout out.",
        ),
        "flow": flow_table(read("flow_speed.json")),
        "cold": cold_table(read("cold_start.json")),
        "long": long_table(read("long_inputs.json")),
        "generation": generation_table(read("long_generation.json")),
    }


def with_tables(text: str, tables: dict[str, str], where: Path) -> str:
    """`text` with the body between each table's markers replaced; each pair of markers must be
    there exactly once (ValueError naming the file and the table otherwise)."""
    for name, body in tables.items():
        pattern = re.compile(rf"(<!-- benchmarks:{name} -->\n).*?(<!-- /benchmarks:{name} -->)", re.S)
        found = len(pattern.findall(text))
        if found != 1:
            raise ValueError(f"{where}: the markers of table {name!r} appear {found} times, expected once")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a table is stale")
    args = parser.parse_args()
    tables, stale = rendered(), []
    for path, names in DOCUMENTS.items():
        text = path.read_text(encoding="utf-8")
        new = with_tables(text, {name: tables[name] for name in names}, path)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale benchmark tables in {', '.join(map(str, stale))}: run python benchmarks/tables.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
