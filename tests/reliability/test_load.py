"""One training iteration with 256 concurrent episodes through the Ray env pool (tiny model, real vLLM engine,
real search QA env, DeepSpeed learner), with the whole process tree's memory bounded.

The tiny model writes no valid action by itself; a `slot_fill` scaffold (forced `<search>` … `</search>` around 4
sampled tokens, masked out of the loss) makes every turn a real search, so all 256 episodes step the pool (one turn
each: the learner's update on 256 samples is then the iteration's main cost, ~1 min here).
"""

from __future__ import annotations

import pytest
from reliability_runs import finish, launch, metrics

from agentforge.reliability.rss import PeakTreeRSS

pytestmark = pytest.mark.integration

EPISODES = 256
# measured on this 2-core machine: 2.6-3.0 GiB for the tree (driver with engine and learner, Ray's gcs, raylet and
# agents, 2 env workers), summed RSS; the bound leaves a third for noise and allocator differences
PEAK_BOUND_GB = 4.0


def test_one_iteration_of_256_concurrent_episodes_holds_in_bounded_memory(tmp_path, tiny_tokenizer):
    def ids(text: str) -> list[int]:
        return tiny_tokenizer.encode(text, add_special_tokens=False)

    prefix, suffix = ids("<search>"), [*ids("</search>"), tiny_tokenizer.eos_token_id]
    overrides = [
        "recipe=debug", "env=search_qa", "env_pool.kind=ray", "logger.wandb=false", "trainer.iterations=1",
        "trainer.tasks_per_iteration=16", "trainer.group_size=16", "trainer.eval_before=false", "trainer.eval_every=0",
        "trainer.checkpoint_every=0", "agent.max_turns=1", "agent.sampling.max_new_tokens=16",
        "agent.execute_relaxed=true",
        f"agent.intervention={{kind:slot_fill,params:{{prefix:{prefix},free:4,suffix:{suffix}}}}}".replace(" ", ""),
        f"run_dir={tmp_path / 'run'}",
    ]
    log = tmp_path / "load.log"
    proc = launch(tmp_path, log, overrides)
    with PeakTreeRSS(proc.pid, interval=0.2) as peak:
        finish(proc, log)
    row = metrics(tmp_path / "run")[1]
    assert row["train/episodes"] == EPISODES and row["train/env_steps"] == EPISODES
    assert row["env/restarts"] == 0 and row["env/timeouts"] == 0
    peak_gb = peak.peak / 2**30
    print(f"{EPISODES} episodes, {row['train/env_steps']:.0f} env steps; peak tree RSS {peak_gb:.2f} GiB")
    assert peak_gb < PEAK_BOUND_GB, f"the process tree peaked at {peak_gb:.2f} GiB"
