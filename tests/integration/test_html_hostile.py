"""Hostile strings in the self-contained HTML page, in a real headless browser (Chromium): inputs
such as ``<!--<script>`` once put the page's JSON block into the HTML parser's double-escaped state
and the page rendered blank. Whatever the tokens, titles and labels hold, the page renders them as
text and runs none of them. Skipped only where no Chromium is installed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnflow.viz import html_page
from tests._cli import run_cli
from tests.integration.test_html_browser import CHROMIUM, _load

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium not installed (apt-get install chromium): no headless browser to load the page",
)

# Each would run if the page let it out of its JSON block: it marks the page's body.
MARK = "document.body.setAttribute('data-pwned','1')"
HOSTILE = [
    "<!--<script>",
    f"</script><script>{MARK}</script>",
    "</script><script>alert(1)</script>",
    "<!--",
    "-->",
    "<script>",
    "</SCRIPT >",
    "]]>",
    "<![CDATA[",
    f'<img src=x onerror="{MARK}">',
    "&lt;&amp;&#x3c;",
    "a\u2028b\u2029c",
    '"\\',
    "\x00\x1b",
]


def _assert_safe(dom, console: list[str]) -> None:
    """Rendered (the page's script ran to the end), no script error, no injected code ran."""
    assert dom.body.get("data-ready") == "1", "the page did not render"
    assert "data-error" not in dom.body and console == []
    assert "data-pwned" not in dom.body


def test_script_json_escapes_what_could_leave_a_script_block():
    from attnflow.viz import script_json

    text = script_json({"s": HOSTILE})
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text
    assert json.loads(text) == {"s": HOSTILE}  # the same data for JSON.parse


def test_hostile_strings_everywhere_render_as_text_and_run_nothing(tmp_path):
    n = len(HOSTILE)
    items = [
        {
            "title": f"good {s} movie",
            "subtitle": s,
            "columns": ["[CLS]", *HOSTILE, "[SEP]"],
            "rows": [f"L1 {s}", "L2"],
            "maps": {s: np.full((2, n + 2), 1.0 / (n + 2)), "rollout": np.eye(2, n + 2)},
            "method": s,
            "muted": [0, n + 1],
        }
        for s in HOSTILE
    ]
    page = html_page(items, title="attnflow <!--<script>", row_name="layer <!--")
    dom, console = _load(page, tmp_path)
    _assert_safe(dom, console)
    assert dom.tokens == ["[CLS]", *HOSTILE, "[SEP]"]
    assert dom.body.get("data-method") == HOSTILE[0]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_one_hostile_token_still_renders_the_page(tmp_path, hostile):
    item = {
        "title": hostile,
        "columns": ["a", hostile, "b"],
        "rows": ["L1"],
        "maps": {"raw": [[0.2, 0.5, 0.3]]},
    }
    dom, console = _load(html_page([item]), tmp_path)
    _assert_safe(dom, console)
    assert dom.tokens == ["a", hostile, "b"]


# -- the pages the CLI writes ----------------------------------------------------------------------


def test_explain_html_of_a_hostile_text_renders(tmp_path):
    pytest.importorskip("transformers")
    from tests._tiny import BERT_WORDS, make_tiny_bert

    model = make_tiny_bert(tmp_path / "bert", words=[*BERT_WORDS, "<", "!", "-", ">", "/", "script"])
    out = tmp_path / "out"
    text = "good <!--<script> movie"
    proc = run_cli("explain", "--model", str(model), "--text", text, "--text", "bad </script> movie",
                "--device", "cpu", "--method", "rollout,flow", "--format", "html", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    dom, console = _load((out / "explain.html").read_text(encoding="utf-8"), tmp_path)
    _assert_safe(dom, console)
    assert dom.tokens == ["[CLS]", "good", "<", "!", "-", "-", "<", "script", ">", "movie", "[SEP]"]


def test_generate_html_of_a_hostile_prompt_renders(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = ["[UNK]", "the", "<!--<script>", "tower", "</script>", "is", "in", "]]>", "paris"]
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(words), n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                     bos_token_id=None, eos_token_id=None)  # fmt: skip
    model = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(model)
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # "<!--<script>" is one token
    tk.decoder = decoders.WordPiece(prefix="##")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(model)
    out = tmp_path / "out"
    prompt = "the <!--<script> tower is in ]]> paris"
    proc = run_cli("generate", "--model", str(model), "--prompt", prompt, "--max-new-tokens", "3",
                "--device", "cpu", "--format", "html", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    dom, console = _load((out / "generate.html").read_text(encoding="utf-8"), tmp_path)
    _assert_safe(dom, console)
    assert dom.tokens == prompt.split()
