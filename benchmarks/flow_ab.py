"""Table-1 CLS flow (or all pairs), this checkout's build against a revision's, in alternating processes.

    python benchmarks/flow_ab.py --ref-rev 4c13413 --rounds 10
    python benchmarks/flow_ab.py --ref-rev 4c13413 --workload allpairs --rounds 6

On a shared machine one run of `flow_speed.py --ref-rev` (each build timed once, one after the
other) moves by more than a change of a few percent. Here each round starts one process per build
(the order alternating from round to round), each times the batched call (100 samples x 6 layers
x 8 heads x 20 tokens, fastest of 60) and one call per sample (fastest of 8 passes), with
`flow_speed.best_seconds` (after one untimed call). `--workload allpairs`: every source of one
sample of 12 layers x 12 heads x 128 tokens instead (fastest of 2). Printed: every round's times,
the ratio of the medians (this build / the revision's), and whether both builds gave the same
values, bit for bit (a hash of each build's output). The revision is built
by `_gitref.build_at` (once, into benchmarks/.cache/site/); the working tree's kernels are those
last built (`pip install -e .` after editing src/cpp).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = r"""
import hashlib, json, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[1])
if sys.argv[2] != "-":
    import _gitref
    _gitref.use_site(Path(sys.argv[2]))
import flow_speed  # its helpers, on the attnflow this process imports
lib = flow_speed.lib
digest = lambda out: hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
rng = np.random.default_rng(0)
if sys.argv[3] == "allpairs":
    attn = flow_speed.random_attention(rng, (1, 12, 12, 128, 128))
    call = lambda: lib.attention_flow(attn, sources=list(range(128)), normalize=False, progress=False)
    print(json.dumps({"all pairs s/call": flow_speed.best_seconds(call, 2), "values": digest(call())}))
    sys.exit(0)
attn = rng.random((100, 6, 8, 20, 20))
attn /= attn.sum(-1, keepdims=True)
batch = flow_speed.best_seconds(lambda: lib.attention_flow(attn, sources=[0], normalize=False), 60)
single = flow_speed.best_seconds(lambda: [lib.attention_flow(a, sources=[0], normalize=False) for a in attn], 8)
values = digest(lib.attention_flow(attn, sources=[0], normalize=False))
print(json.dumps({"batched ms/call": batch * 1e3, "one call per sample ms/sample": single * 10, "values": values}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref-rev", required=True, help="the revision whose build to compare with")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--workload", choices=("table1", "allpairs"), default="table1")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least one round")
    sys.path.insert(0, str(HERE))
    import _gitref

    if error := _gitref.unknown_ref(args.ref_rev):
        parser.error(error)
    site = str(_gitref.build_at(args.ref_rev))
    times: dict[str, list[dict]] = {"now": [], "ref": []}
    for r in range(args.rounds):
        sides = [("now", "-"), ("ref", site)]
        for name, arg in sides if r % 2 == 0 else sides[::-1]:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(HERE), arg, args.workload],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            times[name].append(json.loads(out.strip().splitlines()[-1]))
    print(
        f"load after: {os.getloadavg()[0]:.2f}; {args.rounds} rounds of {args.workload}, {args.ref_rev} = ref"
    )
    values = {t.pop("values") for side in times.values() for t in side}
    print(
        "values: the same bit for bit in every process"
        if len(values) == 1
        else f"values DIFFER: {sorted(values)}"
    )
    for key in times["now"][0]:
        now = [t[key] for t in times["now"]]
        ref = [t[key] for t in times["ref"]]
        ratio = statistics.median(now) / statistics.median(ref)
        print(f"{key}: now {' '.join(f'{v:.3f}' for v in now)}")
        print(f"{' ' * len(key)}  ref {' '.join(f'{v:.3f}' for v in ref)}  -> median now / ref {ratio:.3f}")


if __name__ == "__main__":
    main()
