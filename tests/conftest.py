"""Shared test set-up: offline, quiet, and never touching the repository's own MLflow store."""

from __future__ import annotations

import os

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
