"""Extra peak memory of last-row attention flow on a long causal graph, per input length.

    python benchmarks/flow_memory.py                               # T = 256, 512, 1024; 30 layers
    python benchmarks/flow_memory.py --lengths 2048,4096 --cap-gb 16
    python benchmarks/flow_memory.py --ref-rev f826a27^            # and the same at that revision
    python benchmarks/flow_memory.py --lengths 64 --layers 4       # smoke test

Last-row flow is the flow from the last token at the top layer to every input token, the one flow
a long causal input can afford. Two calls, each measured in a fresh process:

- flow_rows: `attnflow.explain.flow.flow_rows` on float64 (1, L, T, T) capacities, the call the
  stream (`attnflow.stream`) makes with its head-mixed capacities; one thread (--threads);
- attention_flow: `attnflow.explain.attention_flow(attn, sources=[T-1], layers=[L-1])` on
  (L, H, T, T) float64 attention (H = 1), the classic path (ATTNFLOW_THREADS=--threads);
- packed: `attnflow.explain.flow.flow_rows_packed` on the same capacities packed as lower
  triangles (`pack_lower`, (L, T (T + 1) / 2)), what the stream keeps for a causal graph past
  `attnflow.stream.FLOW_THREAD_BYTES` (they take half the bytes of the dense ones).

The synthetic graph (seeded): each layer's attention is exp(2 z) over the causal prefix (z standard
normal, lower triangle), the sink column (token 0) x 20, rows normalised; flow_rows gets it mixed
with the residual (0.5 A + 0.5 I, rows normalised), attention_flow mixes it itself. "Extra peak" is
the largest resident set during the call minus the resident set just before it, inputs built
(`long_inputs.Peak`, polled every 2 ms); the ratio is that over the bytes of the float64 (L, T, T)
capacities, measured in the same worker. The call is the worker's first (what a user's one call
pays). Workers run under `long_inputs.watch`: glibc's MALLOC_MMAP_THRESHOLD_ at 64 KiB (the
resident set follows live memory) and stopped past --cap-gb (8 by default), reported as "over the
cap". --ref-rev REV also runs every worker against REV's attnflow, built with its own C++ kernels
(`_gitref.build_at`, kept in benchmarks/.cache/site/); the ratio ref / now is printed per row, and
the values' sha256 tells whether both builds gave the same bits.
Writes benchmarks/results/flow_memory.json after each measurement (a late kill keeps the rest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from long_inputs import Peak, watch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "flow_memory.json"
LENGTHS = (256, 512, 1024)
LAYERS = 30  # SmolLM2-135M's depth
PATHS = ("flow_rows", "attention_flow", "packed")
SINK = 20.0  # token 0's weight before normalising: a strong attention sink, as in trained decoders
SHARPNESS = 2.0
RESIDUAL = 0.5


def causal_attention(layers: int, tokens: int):
    """(L, T, T) float64: softmax-like rows over the causal prefix, a sink at token 0."""
    import numpy as np

    rng = np.random.default_rng(0)
    above = ~np.tril(np.ones((tokens, tokens), bool))
    attn = np.empty((layers, tokens, tokens))
    for layer in range(layers):  # one (T, T) temporary at a time
        w = np.exp(rng.standard_normal((tokens, tokens)) * SHARPNESS)
        w[:, 0] *= SINK
        w[above] = 0.0
        attn[layer] = w / w.sum(-1, keepdims=True)
    return attn


def worker(path: str, tokens: int, layers: int, threads: int) -> dict:
    """One measurement in this process: the inputs, then the call under Peak."""
    import numpy as np

    from attnflow.explain import flow

    attn = causal_attention(layers, tokens)  # (L, T, T)
    caps_bytes = layers * tokens * tokens * 8
    if path == "packed":  # the stream's layout for a causal graph past FLOW_THREAD_BYTES
        caps = attn
        caps *= RESIDUAL
        caps[:, np.arange(tokens), np.arange(tokens)] += 1 - RESIDUAL
        caps /= caps.sum(-1, keepdims=True)
        packed = flow.pack_lower(caps)
        del attn, caps
        with Peak() as peak:
            values = flow.flow_rows_packed(packed, tokens, [layers - 1], [tokens - 1])[None]
    elif path == "flow_rows":
        caps = attn[None]  # (1, L, T, T), mixed in place: the stream's capacities
        caps *= RESIDUAL
        caps[0, :, np.arange(tokens), np.arange(tokens)] += 1 - RESIDUAL
        caps /= caps.sum(-1, keepdims=True)
        del attn
        valid = np.ones((1, tokens), bool)
        row_layer = np.array([layers - 1])
        supply = caps[:, row_layer, [tokens - 1], :]  # (1, 1, T): the last token's row at the top
        with Peak() as peak:
            values = flow.flow_rows(caps, valid, row_layer, supply, valid[:, [tokens - 1]], progress=False, threads=threads)  # fmt: skip
    else:
        attn = attn[:, None]  # (L, H=1, T, T)
        with Peak() as peak:
            values = flow.attention_flow(attn, sources=[tokens - 1], layers=[layers - 1], progress=False)
    import attnflow

    return {
        "path": path, "tokens": tokens, "layers": layers, "threads": threads, "seconds": peak.seconds,
        "extra_peak_bytes": peak.extra, "caps_bytes": caps_bytes, "ratio_to_caps": peak.extra / caps_bytes,
        "values_sha256": hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest(),
        "attnflow": str(Path(attnflow.__file__).parent),
    }  # fmt: skip


def run_worker(path: str, tokens: int, layers: int, threads: int, cap_gb: float, site: Path | None) -> dict:
    """`worker` in a fresh process (against the build in `site`, if given), stopped past cap_gb."""
    cmd = [sys.executable, __file__, "--worker", path, str(tokens), str(layers), "--threads", str(threads)]
    if site is not None:
        cmd += ["--site", str(site)]
    env = dict(os.environ, ATTNFLOW_THREADS=str(threads))
    out, returncode, process_peak, over = watch(cmd, cap_gb, env)
    row = {"path": path, "tokens": tokens, "layers": layers, "threads": threads}
    if over:
        return {**row, "over_cap_gb": cap_gb}
    if returncode != 0:
        return {**row, "error": returncode}
    return {**json.loads(out.strip().splitlines()[-1]), "process_peak_bytes": process_peak}


def _save(meta: dict, rows: list[dict]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    tmp.replace(RESULTS)


def _line(r: dict) -> str:
    head = f"{r['rev']:<12} {r['path']:<14} T={r['tokens']:>5} L={r['layers']:>3}"
    if "over_cap_gb" in r:
        return f"{head} over the {r['over_cap_gb']:g} GB cap"
    if "error" in r:
        return f"{head} failed (exit {r['error']})"
    return (
        f"{head} {r['seconds']:8.2f} s  extra peak {r['extra_peak_bytes'] / 2**20:8.1f} MiB "
        f"({r['ratio_to_caps']:.2f}x the caps' {r['caps_bytes'] / 2**20:.1f} MiB)  "
        f"process peak {r['process_peak_bytes'] / 2**30:.2f} GiB  values {r['values_sha256'][:12]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cap-gb", type=float, default=8.0)
    ap.add_argument(
        "--ref-rev", help="also measure this git revision's build (compiled into benchmarks/.cache)"
    )
    ap.add_argument("--worker", nargs=3, metavar=("PATH", "TOKENS", "LAYERS"), help=argparse.SUPPRESS)
    ap.add_argument("--site", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        if args.site is not None:
            from _gitref import use_site

            use_site(args.site)
        path, tokens, layers = args.worker
        print(json.dumps(worker(path, int(tokens), int(layers), args.threads)))
        return
    sides: list[tuple[str, Path | None]] = [("now", None)]
    if args.ref_rev:
        from _gitref import build_at, commit_of, unknown_ref

        if error := unknown_ref(args.ref_rev):
            ap.error(error)
        print(f"building {args.ref_rev} ...", flush=True)
        sides.append((commit_of(args.ref_rev)[:12], build_at(args.ref_rev)))
    meta = {"load_before": os.getloadavg(), "cap_gb": args.cap_gb, "ref_rev": args.ref_rev,
            "malloc_mmap_threshold": 64 * 1024}  # fmt: skip
    print(f"load average {meta['load_before']}")
    rows: list[dict] = json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []
    for tokens in map(int, args.lengths.split(",")):
        for path in args.paths.split(","):
            got = {}
            for rev, site in sides:
                r = run_worker(path, tokens, args.layers, args.threads, args.cap_gb, site)
                r.update(rev=rev, load=os.getloadavg())
                key = (rev, path, tokens, args.layers, args.threads)
                rows = [
                    x for x in rows if (x["rev"], x["path"], x["tokens"], x["layers"], x["threads"]) != key
                ]
                rows.append(r)
                _save(meta, rows)
                print(_line(r), flush=True)
                got[rev] = r
            if len(got) == 2 and all("extra_peak_bytes" in r for r in got.values()):
                now, ref = got["now"], got[sides[1][0]]
                same = "same values" if now["values_sha256"] == ref["values_sha256"] else "VALUES DIFFER"
                print(f"{'':12} ref / now: extra peak {ref['extra_peak_bytes'] / now['extra_peak_bytes']:.2f}x, "
                      f"time {ref['seconds'] / now['seconds']:.2f}x, {same}", flush=True)  # fmt: skip
    meta["load_after"] = os.getloadavg()
    _save(meta, rows)
    print(f"load average {meta['load_after']}; wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
