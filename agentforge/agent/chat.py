"""Turn chat messages into prompt token ids once per turn: the ids the engine sees and the learner trains on."""

from __future__ import annotations

from typing import Any


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Apply the tokenizer's chat template with the generation prompt and return plain token ids."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if hasattr(out, "keys"):  # some tokenizers still return a BatchEncoding
        out = out["input_ids"]
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(t) for t in out]
