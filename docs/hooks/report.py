"""mkdocs hook: publish the study report, reports/report.md, as the page study/report.md.

The report lives outside docs/ because the pipeline's `report` stage writes it; this hook adds it
to the site at build time, so the site always shows the current report, never a copy. Every local
file the report links to (its figures) is published next to it under study/, at the same relative
path, so its links work unchanged; a link to a missing file is a warning (an error under --strict).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mkdocs.structure.files import File, Files

REPORTS = Path(__file__).resolve().parents[2] / "reports"
REPORT = "report.md"
PAGE_DIR = "study"
# Markdown links and images, [text](target "title"), and HTML src= / href= attributes.
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)|\b(?:src|href)=[\"']([^\"']+)[\"']")


def _local_targets(markdown: str) -> set[str]:
    """Relative paths of the local files a Markdown text links to (no URLs, anchors or .md pages)."""
    targets = set()
    for match in _LINK.finditer(markdown):
        url = urlsplit(match.group(1) or match.group(2))
        if url.scheme or url.netloc or not url.path or url.path.startswith("/"):
            continue
        if not url.path.endswith(".md"):
            targets.add(unquote(url.path))
    return targets


def on_files(files: Files, config) -> Files:
    report = REPORTS / REPORT
    if not report.is_file():  # the page in nav is then missing too: mkdocs says so
        return files
    files.append(File.generated(config, f"{PAGE_DIR}/{REPORT}", abs_src_path=str(report)))
    for target in sorted(_local_targets(report.read_text(encoding="utf-8"))):
        path = (REPORTS / target).resolve()
        if path.is_file() and path.is_relative_to(REPORTS):
            files.append(File.generated(config, f"{PAGE_DIR}/{target}", abs_src_path=str(path)))
    return files
