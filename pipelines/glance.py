"""The README's "at a glance" paragraph, written from the committed results in ``reports/``.

    python -m pipelines.glance           # rewrite the paragraph between its markers in README.md
    python -m pipelines.glance --check   # exit 1 when the paragraph differs from the results (a test runs this)

The paragraph sits between ``<!-- results:glance -->`` and ``<!-- /results:glance -->``. Every figure
in it comes from a file the study wrote: accuracies from ``reports/<task>/train_metrics.json`` and
the sweeps' ``jobs.json``, the cells within ±0.10 and the claims from the seed-pooled correlation
tables (the report's own functions, so the README and the report cannot disagree; sweep seeds are
pooled as the committed report pooled them: against the code of its commit, not the checkout's), faithfulness
from ``reports/sst2/faithfulness.parquet`` and ``method_cost.parquet``. Never typed by hand.
"""

from __future__ import annotations

import argparse
import sys

from attnflow.paths import StudyPaths
from attnflow.report.glance import facts, paragraph, refresh, report_code
from pipelines import _config

README = _config.ROOT / "README.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the paragraph is stale")
    args = parser.parse_args()
    cfg = _config.load(_config.ROOT / _config.PARAMS)
    paths = StudyPaths.from_config(cfg.paths, root=_config.ROOT)
    allow = bool(cfg.report.allow_mixed_code)
    body = paragraph(facts(paths, int(cfg.seed), report_code(paths, _config.ROOT), allow_mixed_code=allow))
    return refresh(
        README, body, check=args.check, what="the at-a-glance paragraph", command="python -m pipelines.glance"
    )


if __name__ == "__main__":
    sys.exit(main())
