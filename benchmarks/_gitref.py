"""attnflow.explain as it is at a git commit, imported under another name: the benchmarks' baseline.

    lib = explain_at("HEAD")        # the last commit (the previous release of the working tree)
    lib = explain_at("8cf0116")     # before the speed work
    lib.attention_flow(attn, sources=[0])

`git archive <ref> src/attnflow/explain` is unpacked once into benchmarks/.cache/ref/<commit>/
(ignored by git) as the package ``attnflow_<commit>``, next to today's ``attnflow``. A ref from
before the compiled kernels (issue 31) needs numba installed; its kernels are compiled on its first
run and cached there. A ref with the compiled kernels cannot be imported this way (its extension is
built by pip, not archived): compare against such a ref by installing it in its own venv. The baseline is the
committed code itself, never a copy kept in the tree. Its modules use relative imports for each
other; the few absolute imports (``attnflow.method_inputs`` in the registry) reach today's package,
which the baseline's flow / rollout / heads / raw / rows never touch.

A ref with the compiled kernels is built whole instead:

    site = build_at("f826a27")      # benchmarks/.cache/site/<commit>: that ref's attnflow, kernels compiled
    # then, in a fresh process (pybind11 refuses a second build of the same module in one process):
    use_site(site)                  # `import attnflow` now reads that build only

`git archive <commit> src/attnflow src/cpp CMakeLists.txt pyproject.toml` (and README.md / LICENSE,
which the package metadata names) is unpacked into a temporary folder and installed with
`pip install --no-deps --target` (its own CMakeLists.txt and C++ sources; a C++17 compiler, and
pip's build requirements: scikit-build-core, pybind11, cmake, ninja). The build is kept per commit.
"""

from __future__ import annotations

import importlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache" / "ref"
SITES = ROOT / "benchmarks" / ".cache" / "site"
# what `pip install` of a revision needs: the package, the kernels' sources and build, the metadata
BUILD_PATHS = ("src/attnflow", "src/cpp", "CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE")
# The public functions the benchmarks call, by module of attnflow.explain.
FUNCTIONS = {
    "flow": ["attention_flow"],
    "rollout": ["attention_rollout"],
    "heads": ["head_flow", "head_rollout"],
    "raw": ["raw_attention"],
    "rows": ["select_rows"],
}


def commit_of(ref: str) -> str:
    """The full commit id of a git ref (a tag, branch, HEAD or short id)."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def unknown_ref(ref: str) -> str | None:
    """The one-line error for a `--ref-rev` git does not know as a commit; None for a commit."""
    try:
        commit_of(ref)
    except subprocess.CalledProcessError:
        return f"--ref-rev {ref!r}: not a commit of this repository"
    return None


def unpack(commit: str) -> Path:
    """src/attnflow/explain at `commit`, as the package attnflow_<commit[:12]> under CACHE/<commit>."""
    name = f"attnflow_{commit[:12]}"
    home = CACHE / commit
    package = home / name
    if not (package / "__init__.py").exists():
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src/attnflow/explain"],
            capture_output=True,
            check=True,
        ).stdout
        staging = home / "staging"
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(staging, filter="data")
        package.mkdir(parents=True, exist_ok=True)
        (staging / "src" / "attnflow" / "explain").rename(package / "explain")
        shutil.rmtree(staging)
        (package / "__init__.py").write_text(f'"""attnflow.explain at {commit} (benchmarks/_gitref.py)."""\n')
    return home


def explain_at(ref: str = "HEAD") -> types.SimpleNamespace:
    """The public explain functions of `ref`, plus `commit` and (where it has one) `warm_up`."""
    commit = commit_of(ref)
    home = unpack(commit)
    if str(home) not in sys.path:
        sys.path.insert(0, str(home))
    base = f"attnflow_{commit[:12]}.explain"
    lib = types.SimpleNamespace(commit=commit, ref=ref, name=base)
    for module, names in FUNCTIONS.items():
        mod = importlib.import_module(f"{base}.{module}")
        for name in names:
            setattr(lib, name, getattr(mod, name))
    maxflow = importlib.import_module(f"{base}._maxflow")
    lib.warm_up = getattr(maxflow, "warm_up", lambda: None)
    return lib


def build_at(ref: str) -> Path:
    """attnflow at `ref`, its C++ kernels compiled, installed into SITES/<commit> (kept); the folder."""
    commit = commit_of(ref)
    site = SITES / commit
    if (site / "attnflow" / "__init__.py").exists():
        return site
    paths = subprocess.run(  # those of BUILD_PATHS that `commit` has (no LICENSE before the first release)
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", commit, "--", *BUILD_PATHS],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="attnflow_build_") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, *paths],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(tree, filter="data")
        staging = SITES / f"{commit}.partial"
        SITES.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target",
             str(staging), "--config-settings", f"build-dir={Path(tmp) / 'build'}", str(tree)],
            check=True,
        )  # fmt: skip
        staging.rename(site)  # only a finished build is ever found under SITES
    return site


def use_site(site: Path) -> None:
    """Import attnflow from `site` only: the editable install's redirect to the working tree is dropped."""
    sys.meta_path[:] = [f for f in sys.meta_path if "ScikitBuild" not in type(f).__name__]
    sys.path.insert(0, str(site))
    import attnflow

    if Path(attnflow.__file__).resolve().parents[1] != site.resolve():
        raise SystemExit(f"attnflow came from {attnflow.__file__}, not from {site}")
