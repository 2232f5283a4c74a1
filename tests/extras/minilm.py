"""[minilm]: the README's example on the classifier packaged in the wheel (offline)."""

from __future__ import annotations

import tempfile
from pathlib import Path


def main() -> None:
    from attnflow import explain_text, load_model

    model, tokenizer = load_model("minilm-sst2")
    e = explain_text(model, tokenizer, "The acting is superb, but the plot is painfully thin.",
                     methods=["rollout", "flow", "chefer", "attnlrp"])  # fmt: skip
    assert e.label == "negative", e.label
    with tempfile.TemporaryDirectory() as tmp:
        e.plot().savefig(Path(tmp) / "explain.png")
    print(f"[minilm] ok: {e.label} (p={e.probability:.2f})")


if __name__ == "__main__":
    main()
