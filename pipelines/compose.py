"""Generate params.yaml from conf/: ``python -m pipelines.compose [key=value ...] [--check]``.

``--check`` writes nothing and exits 1 when params.yaml differs from a fresh composition.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from pipelines import _config


def run(overrides: list[str], *, check: bool = False, path: Path = _config.PARAMS) -> bool:
    """Compose; write (or, with ``check``, compare). Returns True when params.yaml is in sync."""
    fresh = _config.compose(overrides)
    if check:
        on_disk = _config.load(path)
        return OmegaConf.to_container(on_disk) == OmegaConf.to_container(fresh)
    _config.write(fresh, path)
    return True


def main() -> None:
    args = sys.argv[1:]
    check = "--check" in args
    try:
        in_sync = run([a for a in args if a != "--check"], check=check)
    except _config.ConfigError as exc:  # one line naming the file, key and value: no traceback
        sys.exit(f"error: {exc}")
    if check and not in_sync:
        sys.exit("params.yaml differs from conf/: run `python -m pipelines.compose`")
    print("params.yaml is in sync with conf/" if check else "wrote params.yaml")


if __name__ == "__main__":
    main()
