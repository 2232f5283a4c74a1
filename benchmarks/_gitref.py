"""attnflow at a git commit, built whole into its own folder: the benchmarks' baseline.

    site = build_at("f826a27")      # benchmarks/.cache/site/<commit>: that ref's attnflow, kernels compiled
    # then, in a fresh process (pybind11 refuses a second build of the same module in one process):
    use_site(site)                  # `import attnflow` now reads that build only

`git archive <commit> src/attnflow src/cpp CMakeLists.txt pyproject.toml` (and README.md / LICENSE,
which the package metadata names) is unpacked into a temporary folder and installed with
`pip install --no-deps --target` (its own CMakeLists.txt and C++ sources; a C++17 compiler, and
pip's build requirements: scikit-build-core, pybind11, cmake, ninja). The build is kept per commit.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITES = ROOT / "benchmarks" / ".cache" / "site"
# what `pip install` of a revision needs: the package, the kernels' sources and build, the metadata
BUILD_PATHS = ("src/attnflow", "src/cpp", "CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE")


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
