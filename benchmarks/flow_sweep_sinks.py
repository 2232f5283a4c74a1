"""Table-1 CLS flow solved two ways: each (row, sink) problem from a greedy start (the solver's
way for rows of distinct sources) against one warm-started sweep over a row's sinks.

    python benchmarks/flow_sweep_sinks.py          # ~10 s

The workload of `flow_speed.py`'s Table-1 section (100 samples x 6 layers x 8 heads x 20 tokens,
random attention, seed 0), its rows of 3-6 layers: 400 rows x 20 sinks. One thread, kernel calls
only, best of 20 after one untimed call (`flow_speed.best_seconds`):

- cold: `_kernels.run_rows` (every problem from zero flow and a greedy start, what a call runs);
- sweep: per row, `_kernels.sweep` on its forward network -- supply = the row, sink capacities =
  the columns of A_1 one after another, each problem warm-started from the previous one's preflow
  (what `run_lower` does for a causal model); networks and workspaces built before the clock.

Prints both times, their ratio and how many values differ in their last bits (both are exact
maxima within the solver's tolerance); writes benchmarks/results/flow_sweep_sinks.json. Measured
2026-11-27 (docs/performance.md, "Issue 31, third round"): the sweep 3.8-3.9x slower, 6,650 of 8,000
values differing by at most 2.2e-15.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from flow_speed import best_seconds, random_attention  # the same workload and clock

from attnflow.explain import _maxflow, flow

ROOT = Path(__file__).resolve().parents[1]
SEED = 0
REPEATS = 20


def best_ms(fn) -> float:
    return best_seconds(fn, REPEATS) * 1e3


def main() -> None:
    kernels = _maxflow._kernels
    rng = np.random.default_rng(SEED)
    attn = random_attention(rng, (100, 6, 8, 20, 20))
    caps, _ = flow._fast_caps(attn, 0.5, "mean", None, None, False)  # what attention_flow solves
    n_samples, n_layers, tokens = caps.shape[0], caps.shape[1], caps.shape[-1]
    rows = [(b, layer) for b in range(n_samples) for layer in range(3, n_layers + 1)]
    row_b = np.array([b for b, _ in rows], np.int64)
    row_L = np.array([layer for _, layer in rows], np.int64)
    supply = np.ascontiguousarray([caps[b, layer - 1, 0] for b, layer in rows])  # CLS's row
    lengths = np.full(n_samples, tokens, np.int64)

    cold = np.zeros((len(rows), tokens))
    t_cold = best_ms(lambda: kernels.run_rows(caps, lengths, row_b, row_L, supply, 1, 1, cold))

    nets = [
        (kernels.network(caps, b, layer, tokens, False), kernels.Workspace(layer - 1, tokens),
         np.ascontiguousarray(caps[b, 0].T))  # the sink capacities of sink j: column j of A_1
        for b, layer in rows
    ]  # fmt: skip
    swept = np.zeros_like(cold)

    def sweep_all() -> None:
        for r, (net, ws, columns) in enumerate(nets):
            swept[r] = kernels.sweep(net, supply[r], columns, ws)

    t_sweep = best_ms(sweep_all)
    result = {
        "command": "python benchmarks/flow_sweep_sinks.py",
        "load_average": os.getloadavg(),
        "problems": int(cold.size),
        "cold_ms": t_cold,
        "sweep_ms": t_sweep,
        "sweep_over_cold": t_sweep / t_cold,
        "values_differing": int((swept != cold).sum()),
        "max_abs_diff": float(np.abs(swept - cold).max()),
    }
    print(
        f"{len(rows)} rows x {tokens} sinks, one thread: problems from a greedy start {t_cold:.2f} ms, "
        f"one sweep per row {t_sweep:.2f} ms ({t_sweep / t_cold:.1f}x); {result['values_differing']} of "
        f"{cold.size} values differ (max {result['max_abs_diff']:.1e}); load {result['load_average']}"
    )
    out = ROOT / "benchmarks" / "results" / "flow_sweep_sinks.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
