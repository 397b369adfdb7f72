"""learner/lora.py's names: the members of a fused projection group a partial weight push must also carry."""

from __future__ import annotations

import pytest

from agentforge.learner.lora import hf_name, packed_siblings

pytestmark = pytest.mark.unit


def test_a_partial_fused_group_names_its_missing_members_per_layer():
    given = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.weight",
             "model.layers.3.mlp.up_proj.weight", "model.layers.0.self_attn.o_proj.weight"}
    assert packed_siblings(given) == {"model.layers.0.self_attn.k_proj.weight", "model.layers.3.mlp.gate_proj.weight"}
    whole = {f"model.layers.1.self_attn.{m}.weight" for m in ("q_proj", "k_proj", "v_proj")}
    assert packed_siblings(whole) == set()  # a whole group, or modules in none (o_proj, down_proj), need nothing
    assert packed_siblings({"model.layers.2.self_attn.q_proj.bias"}) == {
        "model.layers.2.self_attn.k_proj.bias", "model.layers.2.self_attn.v_proj.bias"}


def test_peft_names_map_to_hf_names():
    assert hf_name("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") == \
        "model.layers.0.self_attn.q_proj.weight"
