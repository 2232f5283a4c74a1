"""[study]: the study's libraries import, and an MLflow store is built from the committed reports
(`python -m attnflow.tracking.rebuild`), the way to browse the study without re-running it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    import dvc  # noqa: F401
    import hydra  # noqa: F401
    import pytorch_lightning  # noqa: F401

    import attnflow.lit
    import attnflow.tracking  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        # a copy of what a clone holds, so the store's artifacts (root/mlruns) stay out of the checkout
        root = Path(tmp)
        for name in ("params.yaml", "dvc.yaml", "dvc.lock"):
            shutil.copy(ROOT / name, root / name)
        for folder in ("reports", "pipelines"):
            shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
        store = f"sqlite:///{root / 'mlflow.db'}"
        subprocess.run([sys.executable, "-m", "attnflow.tracking.rebuild", "--root", str(root), "--store", store],
                       check=True)  # fmt: skip
    print("[study] ok")


if __name__ == "__main__":
    main()
