"""Build an MLflow store from the committed study, to browse it without re-running it (seconds):

    python -m pipelines.rebuild_mlflow                      # sqlite:///mlflow.db
    python -m pipelines.rebuild_mlflow --store sqlite:////tmp/study.db
    mlflow ui --backend-store-uri sqlite:///mlflow.db

What `attnflow.tracking.rebuild` makes (see its docstring), with the config-group choices and the
overrides read from conf/ as a `dvc repro` stage reads them, and each committed sweep job's config
composed from its overrides (reports/<sweep>/jobs.json), so run names, tags and the headline view
are a live run's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from attnflow.tracking import rebuild
from pipelines import _config, _stage


def run(argv: list[str] | None = None) -> int:
    args = rebuild.build_parser().parse_args(argv)
    root = _config.ROOT if args.root == "." else args.root
    config = rebuild.read_config(f"{root}/params.yaml")
    passed = [f"--root={root}", f"--store={args.store}"] + (
        [f"--reports={args.reports}"] if args.reports else []
    )
    passed += [f"--choice={g}={o}" for g, o in args.choice]
    return rebuild.main(
        passed, choices=_config.group_choices(config), overrides=_stage.overrides(config), describe=describe
    )


def describe(overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """A sweep job's config and choices, composed from its Hydra overrides as the sweep composed it."""
    config = _config.to_dict(_config.compose(list(overrides)))
    return config, _config.group_choices(config)


if __name__ == "__main__":
    sys.exit(run())
