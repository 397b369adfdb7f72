"""Held-out sets by content (agentforge/tasks/held_out.py): de-duplicated, test before eval and disjoint from it,
kept out of every training stream, the overlap measured rather than assumed. Keys here are plain functions of the
seed (a task space of known size); the envs' own keys are tested in test_task_keys.py."""

import pytest

from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE, TRAIN_STREAM_STRIDE, MixedTaskSampler, TaskSampler, task_sampler
from agentforge.tasks.held_out import (
    MAX_CONSECUTIVE_SKIPS,
    TrainingFilter,
    TrainingStreams,
    build_held_out,
    held_out_set,
    run_record,
)

pytestmark = pytest.mark.unit


def modulo_key(space: int):
    """A task space of `space` contents: seed s has content s mod space (whatever its split)."""
    return lambda task: f"content-{task.seed % space}"


def identity(key: str) -> str:
    return key


def test_a_held_out_set_holds_distinct_contents_and_says_how_many_it_found():
    found = held_out_set("toy", "eval", 8, modulo_key(5), identity)
    assert len(found.tasks) == 5 and len(set(found.digests)) == 5  # the space holds 5: no repeat kept
    assert found.repeats > 0 and found.scanned == 4 * 8 + 256  # it looked as far as it may, then stopped
    assert found.to_json()["requested"] == 8 and found.to_json()["distinct"] == 5
    assert "ran out of new content" in found.describe()
    full = held_out_set("toy", "test", 3, modulo_key(1000), identity)
    assert [t.seed for t in full.tasks] == [SPLIT_SEED_BASE["test"] + i for i in range(3)] and full.scanned == 3
    with pytest.raises(ConfigError, match="held-out split 'train'"):
        held_out_set("toy", "train", 3, modulo_key(5), identity)


def test_test_is_built_first_and_eval_skips_its_contents():
    held_out = build_held_out(["toy"], {"test": 4, "eval": 4}, modulo_key(50), identity)
    test, evaluation = held_out.sets["test"]["toy"], held_out.sets["eval"]["toy"]
    assert not set(test.digests) & set(evaluation.digests)
    # the eval split's seeds 1e6 + i have contents i mod 50 = the test split's (2e6 + i): eval skips all four
    assert evaluation.in_other_split == 4 and len(evaluation.tasks) == 4
    # the test set does not move when the eval set grows
    bigger = build_held_out(["toy"], {"test": 4, "eval": 20}, modulo_key(50), identity)
    assert bigger.sets["test"]["toy"].digests == test.digests
    assert held_out.tasks("eval", 2) == evaluation.tasks[:2]


def test_training_streams_skip_held_out_content_and_record_what_they_trained_on():
    held_out = build_held_out(["toy"], {"test": 10, "eval": 10}, modulo_key(40), identity)
    training = TrainingFilter(modulo_key(40), identity, held_out.reserved())
    tasks = task_sampler("toy", None, "train", admit=training.admit).sample(100)
    contents = {f"content-{t.seed % 40}" for t in tasks}
    assert len(tasks) == 100 and not contents & held_out.reserved()
    assert training.skipped > 0 and training.trained == contents  # half of a 40-content space is reserved
    streams = TrainingStreams(0, training)
    record = run_record(held_out, streams, {"eval": held_out.tasks("eval", 10), "test": held_out.tasks("test", 10)})
    assert record["overlap"] == {"eval": {"tasks": 10, "trained_on": 0}, "test": {"tasks": 10, "trained_on": 0}}
    # the overlap is measured, not assumed: a record of a stream that did train on held-out content says so
    leaked = run_record(held_out, streams, {"test": held_out.tasks("test", 10)},
                        earlier={held_out.sets["test"]["toy"].digests[0]})
    assert leaked["overlap"]["test"]["trained_on"] == 1 and leaked["training"]["warm_start_tasks_known"]


def test_a_stream_of_only_held_out_content_stops_with_a_clear_error():
    held_out = build_held_out(["toy"], {"test": 3, "eval": 3}, modulo_key(6), identity)
    training = TrainingFilter(modulo_key(6), identity, held_out.reserved())
    with pytest.raises(ConfigError, match="too few distinct tasks for held-out sets"):
        TaskSampler("toy", admit=training.admit).sample(1)
    assert training.skipped == MAX_CONSECUTIVE_SKIPS


def test_a_run_seed_moves_every_training_stream():
    first = TaskSampler("toy").sample(3)
    moved = TaskSampler("toy", stream=2).sample(3)
    assert [t.seed for t in first] == [0, 1, 2]
    assert [t.seed for t in moved] == [2 * TRAIN_STREAM_STRIDE + i for i in range(3)]
    mixed = MixedTaskSampler({"a": 1.0, "b": 1.0}, stream=1, admit=lambda t: t.seed % 2 == 0).sample(4)
    assert [(t.env, t.seed - TRAIN_STREAM_STRIDE) for t in mixed] == [("a", 1), ("b", 1), ("a", 3), ("b", 3)]
    sampler = TaskSampler("toy", admit=lambda t: t.seed % 3 == 0)
    sampler.sample(2)
    assert sampler.position == 4  # skipped seeds are drawn too: a resumed stream goes on where it stopped
