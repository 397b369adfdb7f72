"""On-policy distillation through the real learner and the whole loop: the teacher's log-probs on a learner rank
equal its own forward on the same ids, a teacher with another tokenizer is refused, and `algorithm=opd` trains,
checkpoints and resumes with the teacher's settings (tiny student, a perturbed copy of it as the teacher)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from agentforge.errors import ConfigError
from agentforge.learner import Learner, LearnerConfig, TurnSample
from agentforge.learner.teacher import check_same_tokenizer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def teacher_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("teacher"))


def perturbed_copy(tiny_model_dir: Path, out: Path) -> Path:
    """The tiny model with every weight moved a little: a teacher that disagrees with the student."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    model.save_pretrained(out)
    for name in Path(tiny_model_dir).iterdir():
        if "token" in name.name or name.name in ("special_tokens_map.json", "vocab.json", "merges.txt"):
            shutil.copy(name, out / name.name)
    return out


def samples(seed: int = 0) -> list[TurnSample]:
    rng = np.random.default_rng(seed)
    out = []
    for prompt, response in ((5, 7), (9, 3), (4, 10)):
        ids = rng.integers(0, 1000, prompt + response)
        out.append(TurnSample(input_ids=ids, loss_mask=np.r_[np.zeros(prompt, bool), np.ones(response, bool)],
                              old_logprobs=np.zeros(prompt + response, np.float32), advantage=0.0,
                              prompt_len=prompt))
    return out


def test_the_teachers_logprobs_equal_its_own_forward_on_the_same_ids(tiny_model_dir, teacher_dir):
    from transformers import AutoModelForCausalLM

    config = LearnerConfig.from_mapping({"dtype": "float32", "micro_batch_tokens": 24, "temperature": 1.0,
                                         "teacher": {"path": str(teacher_dir)}})
    batch = samples()
    with Learner(str(tiny_model_dir), config, in_process=True) as learner:
        got = learner.compute_teacher_logprobs(batch)
    teacher = AutoModelForCausalLM.from_pretrained(str(teacher_dir), dtype=torch.float32).eval()
    for sample, values in zip(batch, got, strict=True):
        ids = torch.as_tensor(sample.input_ids)[None]
        with torch.no_grad():
            logp = torch.log_softmax(teacher(ids).logits[0].float(), -1)
        p = sample.prompt_len
        expected = logp[p - 1:-1].gather(-1, ids[0, p:, None])[:, 0].numpy()
        np.testing.assert_allclose(values, expected, atol=1e-5)


def test_a_teacher_with_another_tokenizer_is_refused(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    other.add_tokens(["<teacher-only>"])
    other.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="not the student's"):
        check_same_tokenizer(tiny_model_dir, tmp_path)
    check_same_tokenizer(tiny_model_dir, tiny_model_dir)


def test_opd_trains_with_lora_checkpoints_and_resumes_with_its_teacher(tmp_path, teacher_dir):
    from test_objective_runs import train

    run_dir = tmp_path / "run"
    options = ["algorithm=opd", f"learner.teacher.path={teacher_dir}", "learner.lora.enabled=true",
               "trainer.checkpoint_every=1"]
    first = train(run_dir, "trainer.iterations=1", *options)[0]
    assert first["train/skipped"] == 0 and first["time/teacher"] > 0
    assert first["adv/teacher_minus_student_abs"] > 1e-3 and first["adv/reverse_kl"] == first["adv/reverse_kl"]
    resumed = train(run_dir, "trainer.iterations=2", f"resume={run_dir}", *options)
    assert [r["iteration"] for r in resumed] == [1, 2] and resumed[1]["adv/teacher_minus_student_abs"] > 1e-3


def test_self_distillation_scores_the_students_tokens_with_its_own_weights_shown_the_solution(tmp_path):
    from test_objective_runs import train

    first = train(tmp_path / "run", "trainer.iterations=1", "algorithm=opd", "algorithm.teacher=self")[0]
    assert first["train/privileged_fraction"] > 0.5 and first["train/skipped"] == 0 and first["time/teacher"] > 0
    # the same weights: only the hint in the prompt moves the teacher away from the student
    assert first["adv/teacher_minus_student_abs"] > 1e-3


def test_a_topk_divergence_moves_the_student_toward_the_loaded_teacher(tiny_model_dir, teacher_dir):
    """GKD's JSD on the teacher's top-8 tokens (learner.teacher.divergence=jsd): the teacher runs on the student's
    packed micro-batches, the loss is the divergence itself, and steps on it bring it down; the teacher's logits are
    needed, so a served teacher is refused, and so is self-distillation."""
    config = LearnerConfig.from_mapping({"dtype": "float32", "micro_batch_tokens": 24, "temperature": 1.0, "lr": 1e-2,
                                         "teacher": {"path": str(teacher_dir), "divergence": "jsd", "top_k": 8}})
    batch = samples()
    with Learner(str(tiny_model_dir), config, in_process=True) as learner:
        steps = [learner.update(batch) for _ in range(4)]
    divergences = [s["distill_divergence"] for s in steps]
    assert all(s["skipped"] == 0 and 0 < s["distill_topk_mass"] <= 1 for s in steps)
    assert divergences[0] > 0 and divergences[-1] < 0.8 * divergences[0], divergences
    assert steps[0]["loss"] == pytest.approx(divergences[0])
    with pytest.raises(ConfigError, match="needs its logits: set learner.teacher.path"):
        LearnerConfig.from_mapping({"teacher": {"url": "http://127.0.0.1:1/v1", "divergence": "forward"}}).validate()
    from agentforge.commands.overrides import override_problems

    problems, _ = override_problems(["command=train", "recipe=debug", "algorithm=opd", "algorithm.teacher=self",
                                     "learner.teacher.divergence=jsd", f"learner.teacher.path={teacher_dir}"])
    assert any("not built for teacher=self" in p for p in problems), problems
