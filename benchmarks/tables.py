"""The performance tables of README.md and docs/performance.md, rendered from benchmarks/results/.

    python benchmarks/tables.py           # rewrite the tables between their markers
    python benchmarks/tables.py --check   # exit 1 when a table differs from the results (a test runs this)

Each table sits between ``<!-- benchmarks:NAME -->`` and ``<!-- /benchmarks:NAME -->``: ``flow``
from ``flow_speed.json`` (every figure as a ratio against the baseline timed in the same run) and
``cold`` from ``cold_start.json``. The numbers are never typed by hand, so the README says what
the last committed run measured.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "performance.md")


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def flow_table(result: dict) -> str:
    """The flow_speed.json run: its command, machine and load, then one row per figure."""
    lines = [
        f"`{result['command']}` (ref = {result['ref'][:12]}), {result['cpus']} CPUs, numba threads "
        f"{result['numba_threads']}, load average {result['load_average_before']} before / "
        f"{result['load_average_after']} after; numba compile events inside timed calls after warm-up: "
        f"{result['compiles_in_timed_calls']}.",
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
            f"| cold: fresh read-only install, empty numba cache | {result['cold_s']:.2f} | <= {result['target_cold_s']:g} s: {met} |",
            f"| warm: the same install, numba cache filled | {result['warm_s']:.2f} | |",
            f"| floor: import torch + transformers, load MiniLM, exit | {result['import_and_model_load_s']:.2f} | |",
        ]
    )


def rendered() -> dict[str, str]:
    """Table name -> its markdown, from the committed results."""
    read = lambda name: json.loads((RESULTS / name).read_text(encoding="utf-8"))  # noqa: E731
    return {"flow": flow_table(read("flow_speed.json")), "cold": cold_table(read("cold_start.json"))}


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
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        new = with_tables(text, tables, path)
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
