"""Generation over long prompts: peak memory and time of `explain_generation`, captured vs streamed.

    python benchmarks/long_generation.py                    # SmolLM2-135M-Instruct, prompts of 512 ... 4,096 tokens
    python benchmarks/long_generation.py --lengths 512,1024

Each measurement runs in a fresh process (`long_inputs.run_worker`'s rules: glibc returns freed
blocks, a worker over --cap-gb is stopped and reported as over the cap): `explain_generation` of 8
given completion tokens (the text's next tokens, so both paths explain the same sequence) with
raw attention and rollout and the default sink handling (sinks="auto": the sinks found, then
"diagonal"), through

- captured: stream=False, one eager forward keeping (L, H, T, T) attentions, float64 maps;
- streamed: stream=True, `attnflow.stream`: one forward that also adds up the sink scores, one
  with the sinks handled; no (L, H, T, T) held.

"Extra peak" is the largest resident set during the call minus the one just before it.
Writes benchmarks/results/long_generation.json after each measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_inputs import Peak, _smollm2, watch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "long_generation.json"
LENGTHS = (512, 1024, 2048, 4096)
PATHS = ("captured", "streamed")
NEW = 8  # completion tokens explained


def worker(size: int, path: str) -> dict:
    import torch

    from attnflow.generate import explain_generation

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    model, ids = _smollm2(size + NEW)
    from attnflow.hf import load_model
    from attnflow.models.smollm2 import smollm2_dir

    _, tokenizer = load_model(str(smollm2_dir()))

    class Ids:  # the prompt's ids as they are: no re-tokenisation of decoded text
        def __call__(self, text, return_tensors=None):
            return {"input_ids": ids[:, :size]}

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    completion = ids[0, size:].tolist()
    kwargs = dict(methods=["raw", "rollout"], completion_ids=completion, stream=path == "streamed")
    explain_generation(model, Ids(), "p", **{**kwargs, "completion_ids": completion[:2]})  # warm-up, short
    with Peak() as peak:
        e = explain_generation(model, Ids(), "p", **kwargs)
    return {
        "size": size, "path": path, "tokens": size + NEW - 1, "layers": model.config.num_hidden_layers,
        "heads": model.config.num_attention_heads, "seconds": peak.seconds, "extra_peak_bytes": peak.extra,
        "first_token_share_rollout": float(e.first_token_share["rollout"][-1]),
    }  # fmt: skip


def run_worker(size: int, path: str, cap_gb: float) -> dict:
    """`worker` in a fresh process (`long_inputs.watch`: stopped when its resident set passes cap_gb)."""
    out, returncode, peak, over = watch([sys.executable, __file__, "--worker", str(size), path], cap_gb)
    if over:
        return {"size": size, "path": path, "over_cap_gb": cap_gb}
    if returncode != 0:
        return {"size": size, "path": path, "error": returncode}
    result = json.loads(out.strip().splitlines()[-1])
    result["process_peak_bytes"] = peak
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--cap-gb", type=float, default=8.0)
    parser.add_argument("--worker", nargs=2, metavar=("SIZE", "PATH"))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(int(args.worker[0]), args.worker[1])))
        return
    meta = {"loadavg_start": os.getloadavg(), "cpus": os.cpu_count(), "cap_gb": args.cap_gb}
    rows = []
    for size in map(int, args.lengths.split(",")):
        for path in PATHS:
            r = run_worker(size, path, args.cap_gb)
            rows.append(r)
            if "over_cap_gb" in r:
                print(f"{size:>5} {path:<9} over the {r['over_cap_gb']:g} GB cap", flush=True)
            elif "error" in r:
                print(f"{size:>5} {path:<9} failed (exit {r['error']})", flush=True)
            else:
                print(
                    f"{size:>5} {path:<9} {r['seconds']:7.1f} s  extra peak {r['extra_peak_bytes'] / 2**20:7.0f} MB  "
                    f"process peak {r['process_peak_bytes'] / 2**30:.2f} GB  rollout share of token 0 "
                    f"{r['first_token_share_rollout']:.3f}  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            meta["loadavg_end"] = os.getloadavg()
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            tmp = RESULTS.with_suffix(".tmp")
            tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
            tmp.replace(RESULTS)


if __name__ == "__main__":
    main()
