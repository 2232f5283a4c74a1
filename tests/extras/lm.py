"""[lm]: generation rollout on a tiny random Llama (gguf and accelerate importable, as the packaged
SmolLM2's conversion needs them)."""

from __future__ import annotations


class LetterTokenizer:
    """One token per lower-case letter ("a" = 0): enough tokenizer for explain_generation."""

    all_special_ids = ()

    def __call__(self, text, return_tensors=None):
        import torch

        return {"input_ids": torch.tensor([[ord(c) - 97 for c in text]])}

    def convert_ids_to_tokens(self, ids):
        return [chr(97 + int(i)) for i in ids]

    def decode(self, ids):
        return "".join(chr(97 + int(i)) for i in ids)


def main() -> None:
    import accelerate  # noqa: F401  (transformers' GGUF loading)
    import gguf  # noqa: F401
    import torch
    import transformers

    from attnflow.generate import explain_generation

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=26, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=32, max_position_embeddings=64,
                                      bos_token_id=None, eos_token_id=None)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    g = explain_generation(model, LetterTokenizer(), "abcdefg", max_new_tokens=3, methods=["rollout", "flow"])
    shapes = {m: g.maps[m].shape for m in g.maps}  # (generated, prompt columns, layers)
    assert shapes == {"rollout": (3, 7, 2), "flow": (3, 7, 2)}, shapes
    print(f"[lm] ok: {g.prompt!r} -> {g.completion!r}, maps {shapes}")


if __name__ == "__main__":
    main()
