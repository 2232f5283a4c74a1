"""Install size of attnflow's base and of each extra, from an environment that has them installed.

For each extra: the dependency closure of its requirements (pyproject's optional-dependencies,
resolved through the installed packages' own metadata), and the bytes of every file those
distributions installed (their RECORD). Run it in the study's venv (Python 3.11, CPU torch):

    python benchmarks/install_sizes.py            # a table in MB; --json for the numbers

The base also gets a before/after line: the base as it was while attention flow's max-flow kernels
were compiled by numba at run time (the base's requirements + numba>=0.59, with llvmlite), against
today's base, whose kernels are compiled into attnflow's own wheel (its extension is counted with
attnflow below: a few hundred kB). numba must be installed for that line (it is in the study's venv
while old runs are compared; `pip install numba` otherwise).
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("hf", "minilm", "study", "lm", "compare")


def _parse(requirement: str) -> Requirement:
    return Requirement(requirement)


def closure(requirements: list[str], seen: set[str] | None = None) -> set[str]:
    """Installed distributions that `requirements` pull in (themselves included), markers
    evaluated for this interpreter."""
    seen = set() if seen is None else seen
    for text in requirements:
        req = _parse(text)
        name = canonicalize_name(req.name)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if name in seen or name == "attnflow":
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        wanted = []
        for r in dist.requires or []:
            sub = _parse(r)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                wanted.append(
                    str(Requirement(f"{sub.name}{'[' + ','.join(sub.extras) + ']' if sub.extras else ''}"))
                )
        closure(wanted, seen)
    return seen


def size_mb(names: set[str]) -> float:
    total = 0
    for name in names:
        dist = metadata.distribution(name)
        for f in dist.files or []:
            path = Path(dist.locate_file(f))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def project_requirements() -> dict[str, list[str]]:
    """Each extra's requirements with attnflow's own extras expanded (plus the base)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]

    def expand(reqs: list[str]) -> list[str]:
        out = []
        for r in reqs:
            req = _parse(r)
            out += (
                expand(functools.reduce(operator.iadd, (optional[e] for e in req.extras), []))
                if req.name == "attnflow"
                else [r]
            )
        return out

    base = list(project["dependencies"])
    return {"base": base, **{extra: base + expand(optional[extra]) for extra in EXTRAS}}


# What the base required for flow's speed before the kernels were compiled into the wheel.
OLD_JIT_REQUIREMENT = "numba>=0.59"
# The base must shrink by at least this much without the JIT (issue 31).
TARGET_SHRINK_MB = 200.0


def own_extension_mb() -> float:
    """attnflow's compiled files (the max-flow extension) as installed here, in MB."""
    import attnflow.explain._maxflow._kernels as kernels

    return Path(kernels.__file__).stat().st_size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = {}
    requirements = project_requirements()
    for extra, reqs in requirements.items():
        names = closure(reqs)
        rows[extra] = {"distributions": len(names), "mb": round(size_mb(names), 1)}
    ext = own_extension_mb()
    before = None
    old = closure([*requirements["base"], OLD_JIT_REQUIREMENT])
    if "numba" in old:
        before = {"distributions": len(old), "mb": round(size_mb(old), 1)}
        rows["base_with_numba_before"] = before
        rows["base_shrink_mb"] = round(before["mb"] - rows["base"]["mb"] - ext, 1)
        rows["target_shrink_mb"] = TARGET_SHRINK_MB
    rows["attnflow_extension_mb"] = round(ext, 2)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Python {sys.version.split()[0]}; installed sizes (MB, files of each distribution)")
    for extra in requirements:
        row = rows[extra]
        label = "attnflow" if extra == "base" else f"attnflow[{extra}]"
        print(f"{label:22s} {row['mb']:9.1f} MB  {row['distributions']:4d} distributions")
    print(f"{'  its compiled kernels':22s} {ext:9.2f} MB  (attnflow's own extension, not counted above)")
    if before is None:
        print("base before (with numba): numba is not installed here, no comparison")
        return
    shrink = rows["base_shrink_mb"]
    verdict = "met" if shrink >= TARGET_SHRINK_MB else "NOT met"
    print(
        f"base before, with {OLD_JIT_REQUIREMENT} (numba + llvmlite): {before['mb']:.1f} MB, "
        f"{before['distributions']} distributions; now {rows['base']['mb'] + ext:.1f} MB with the extension: "
        f"{shrink:.1f} MB smaller (target >= {TARGET_SHRINK_MB:g} MB: {verdict})"
    )


if __name__ == "__main__":
    main()
