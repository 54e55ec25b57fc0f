"""A tiny random Llama with a whitespace word-level tokenizer, built offline: what the local provider,
LoRA training and the Fixit end-to-end test load in place of a real model. Import it only after
``pytest.importorskip`` of torch, transformers and tokenizers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL = ["<unk>", "<pad>", "<s>", "</s>"]
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def save_tiny_model(path: Path, words: Iterable[str], *, chat_template: bool = True,
                    max_positions: int = 256) -> Path:
    """Save the tokenizer (vocabulary: the special tokens, then ``words`` once each) and a seeded random
    two-layer model to ``path``."""
    import tokenizers
    import torch
    import transformers

    vocab = {token: i for i, token in enumerate(dict.fromkeys([*SPECIAL, *words]))}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    if chat_template:
        tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(path)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=max_positions, pad_token_id=1, bos_token_id=2, eos_token_id=3,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path
