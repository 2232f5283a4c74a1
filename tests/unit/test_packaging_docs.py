"""The documentation site navigates from disk: every page is a file (``use_directory_urls: false``),
and every relative link or asset of every built page names a file of the site (a link to a folder
works only behind a web server, which adds its index.html)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")


def broken_links(site: Path) -> list[str]:
    """``page -> link`` for each relative link of the built ``site`` that does not name a file of it
    (a folder, a missing page); links with a scheme (https:, mailto:, data:) and same-page anchors are
    not checked, nor 404.html (a web server's page for a missing address: its links are absolute)."""
    broken = []
    for page in sorted(p for p in site.rglob("*.html") if p.relative_to(site).as_posix() != "404.html"):
        for link in _LINK.findall(page.read_text(encoding="utf-8", errors="replace")):
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {link}")
    return broken


def test_the_site_config_writes_pages_as_files():
    import yaml

    config = yaml.safe_load(re.sub(r"!!python/\S+", "", (ROOT / "mkdocs.yml").read_text()))
    assert config["use_directory_urls"] is False


def test_a_link_to_a_folder_is_reported_and_a_link_to_a_file_is_not(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "explain.html").write_text('<a href="../index.html#x">home</a>')
    (tmp_path / "index.html").write_text(
        '<a href="api/explain.html">ok</a><a href="api/">folder</a><a href="https://x.org/">web</a>'
        '<img src="img/missing.png"><a href="#top">here</a>'
    )
    assert broken_links(tmp_path) == ["index.html -> api/", "index.html -> img/missing.png"]


@pytest.mark.slow  # the build takes ~35 s on 2 busy cores
def test_the_built_site_navigates_from_disk(tmp_path):
    missing = [m for m in ("mkdocs", "material", "mkdocstrings") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"the docs extra is not installed (no {', '.join(missing)}): pip install 'attnflow[docs]'"
        )
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    assert (site / "index.html").is_file() and (site / "api" / "explain.html").is_file()
    assert broken_links(site) == []
