"""One checkpoint, one set of numbers (issue 59): a LoRA run trained in bf16 on a base stored in fp32 exports the
weights the trainer's engine and `eval checkpoint=` ran, tensor for tensor, and they generate the same tokens.
The checkpoint is laid out as the learner writes it (learner.json, hf/ with a real peft adapter, COMPLETE), its
adapter made non-zero so that every adapted projection carries a delta."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from agentforge.types import SamplingConfig

pytestmark = pytest.mark.integration

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=16)


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


@pytest.fixture(scope="module")
def bf16_lora_checkpoint(tmp_path_factory, tiny_model_dir: Path) -> Path:
    from transformers import AutoModelForCausalLM

    from agentforge.learner.config import LoraSettings
    from agentforge.learner.lora import wrap_with_lora

    run = tmp_path_factory.mktemp("bf16_lora_run")
    checkpoint = run / "checkpoints" / "iter_000001"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)  # as the learner loads it
    model = wrap_with_lora(base, LoraSettings(enabled=True, rank=8, alpha=16))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:  # lora_B starts at 0: give every adapter a delta worth rounding
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    model.save_pretrained(checkpoint / "learner" / "hf")
    (checkpoint / "learner" / "learner.json").write_text(json.dumps(
        {"model_path": str(tiny_model_dir), "steps": 1, "config": {"dtype": "bfloat16"}}))
    (checkpoint / "trainer_state.json").write_text(json.dumps({"iteration": 1}))
    (checkpoint / "COMPLETE").write_text("")
    return checkpoint


def test_the_export_of_a_bf16_lora_run_is_the_policy_the_trainer_ran(bf16_lora_checkpoint, tmp_path,
                                                                       tiny_model_dir, tiny_tokenizer):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from agentforge.engines import make_engine
    from agentforge.evaluation.checkpoint_source import load_checkpoint_weights, resolve_checkpoint
    from agentforge.export.source import locate
    from agentforge.export.writer import export_model
    from agentforge.models.loading import ModelSpec

    out = tmp_path / "export"
    mine = tmp_path / ".partial-export"  # a folder of the user's with the name the export once used and deleted
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    result = export_model(locate(str(bf16_lora_checkpoint)), out)
    assert (mine / "notes.txt").read_text() == "keep"  # an export removes only what it created
    assert sorted(p.name for p in tmp_path.iterdir()) == [".partial-export", "export"]
    assert out.stat().st_mode & 0o777 == 0o777 & ~current_umask()
    assert result.meta["dtype"] == "bfloat16"  # the checkpoint's own dtype by default
    for shared in ("agentforge_export.json", "README.md"):  # no absolute local path (a user name, a layout)
        text = (out / shared).read_text()
        assert str(Path.home()) + "/" not in text and str(tmp_path) not in text, shared
    assert result.meta["base_model"].startswith("~/") or not result.meta["base_model"].startswith("/")
    assert (out / result.meta["source"]["path"]).resolve() == bf16_lora_checkpoint.resolve()  # relative to out
    source = resolve_checkpoint(bf16_lora_checkpoint)
    pushed = dict(load_checkpoint_weights(source, fallback_base=str(tiny_model_dir)))
    exported = load_file(str(out / "model.safetensors"))
    assert set(exported) <= set(pushed)
    for name, tensor in exported.items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, pushed[name]), name

    # the merge the export used to make (fp32 base, rounded once at the end) differs in the adapted projections:
    # what this test guards against
    fp32 = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
                                     str(source.weights_dir)).merge_and_unload().to(torch.bfloat16).state_dict()
    differing = [n for n, t in exported.items() if not torch.equal(t, fp32[n])]
    assert any(n.endswith("q_proj.weight") for n in differing)

    chats = [tiny_tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=False)
             for text in ("Push the box onto the target.", "What is 3 + 4?")]
    prompts = [tiny_tokenizer(chat, add_special_tokens=False)["input_ids"] for chat in chats]
    trainers = make_engine("hf", ModelSpec(path=str(tiny_model_dir), name="base", dtype="bfloat16"),
                           {"dtype": "bfloat16"})
    export = make_engine("hf", ModelSpec(path=str(out), name="export", dtype="bfloat16"), {"dtype": "bfloat16"})
    try:
        trainers.update_weights(list(pushed.items()))
        expected = [c.token_ids for c in trainers.generate(prompts, GREEDY)]
        assert all(expected) and [c.token_ids for c in export.generate(prompts, GREEDY)] == expected
    finally:
        trainers.close()
        export.close()
