"""Whether learner ranks take GPUs: one per rank, none on a CPU cluster, and never a silent CPU run beside GPUs."""

from __future__ import annotations

import pytest

from agentforge.errors import ConfigError
from agentforge.learner.driver import ranks_use_gpus

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("gpus", "ranks", "expected"), [(0, 1, False), (0, 4, False), (1, 1, True), (8, 4, True)])
def test_gpus_per_rank_or_cpu(gpus, ranks, expected):
    assert ranks_use_gpus(gpus, ranks) is expected


def test_fewer_gpus_than_ranks_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"learner.num_ranks=2 .*CUDA_VISIBLE_DEVICES"):
        ranks_use_gpus(2.0, 4)
