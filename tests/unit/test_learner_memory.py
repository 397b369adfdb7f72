import pytest
from transformers import LlamaConfig

from agentforge.errors import ConfigError
from agentforge.learner.config import LearnerConfig
from agentforge.learner.memory import check_memory_fit, count_parameters, estimate

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory):
    """A Llama-2-7B-shaped config (no weights): the parameter count comes from the config alone."""
    folder = tmp_path_factory.mktemp("llama7b")
    LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                vocab_size=32000).save_pretrained(folder)
    return str(folder)


def test_parameter_count_from_config(seven_b):
    assert 6.5e9 < count_parameters(seven_b) < 7.0e9


def test_full_fp32_7b_on_one_cpu_rank_is_rejected_with_the_ways_out(seven_b):
    with pytest.raises(ConfigError, match="lora.enabled.*zero_stage.*num_ranks"):
        check_memory_fit(seven_b, LearnerConfig(zero_stage=3, num_ranks=1, in_process=True))


def test_zero_stages_and_lora_shrink_the_estimate():
    full = [estimate(7_000_000_000, LearnerConfig(zero_stage=s, num_ranks=8, in_process=False)).bytes_per_rank
            for s in range(4)]
    assert full == sorted(full, reverse=True) and full[0] == 7_000_000_000 * 16
    lora = estimate(7_000_000_000, LearnerConfig.from_mapping({"lora": {"enabled": True}})).bytes_per_rank
    assert lora < full[0] / 3
