"""A served on-policy distillation teacher (`learner.teacher.url`) on loopback: `agentforge serve`'s prompt scoring
(`echo: true, max_tokens: 0`) gives the teacher's own forward log-probs of the student's ids; a server whose tokens
differ from the student's tokenizer is refused at start, naming both; a prompt echo that would also generate is a
400 naming max_tokens; and `algorithm=opd` trains against the served teacher (a perturbed copy of the tiny model,
served by the transformers engine in fp32)."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agentforge.errors import ConfigError
from agentforge.learner.endpoint_teacher import EndpointTeacher, probe_ids

pytestmark = pytest.mark.integration
TOKEN_ENV = "AGENTFORGE_TEST_TEACHER_TOKEN"


@pytest.fixture(scope="module")
def teacher_dir(tiny_model_dir, tmp_path_factory) -> Path:
    from test_opd_runs import perturbed_copy

    return perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("served_teacher"))


@pytest.fixture(scope="module")
def served(teacher_dir):
    """`agentforge serve`'s server on the teacher (transformers engine, fp32), on a free loopback port."""
    from agentforge.engines import make_engine
    from agentforge.models.loading import ModelSpec, load_tokenizer
    from agentforge.serving.server import start
    from agentforge.types import SamplingConfig

    spec = ModelSpec(name="teacher", path=str(teacher_dir), dtype="float32")
    engine = make_engine("hf", spec, {"dtype": "float32", "batch_size": 8})
    server = start(engine, load_tokenizer(spec), SamplingConfig(max_new_tokens=8), teacher_dir, "teacher", 1024)
    yield server
    server.close()


def settings(server, **extra) -> SimpleNamespace:
    values = {"url": server.base_url, "model": None, "api_key_env": TOKEN_ENV, "concurrency": 2, "timeout_s": 60.0}
    return SimpleNamespace(**{**values, **extra})


def test_the_served_teachers_logprobs_equal_its_own_forward(served, teacher_dir, tiny_model_dir, monkeypatch):
    from test_opd_runs import samples
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv(TOKEN_ENV, served.token)
    teacher = EndpointTeacher(settings(served), tiny_model_dir)  # the probe passes: one tokenizer
    assert teacher.model == "teacher"  # the first model /models lists
    batch = samples()
    got = teacher.logprobs(batch)
    model = AutoModelForCausalLM.from_pretrained(str(teacher_dir), dtype=torch.float32).eval()
    for sample, values in zip(batch, got, strict=True):
        ids = torch.as_tensor(sample.input_ids)[None]
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].float(), -1)
        p = sample.prompt_len
        expected = logp[p - 1:-1].gather(-1, ids[0, p:, None])[:, 0].numpy()
        assert values.dtype == np.float32 and values.shape == expected.shape
        np.testing.assert_allclose(values, expected, atol=1e-5)
    assert teacher.seconds > 0


def swapped_tokenizer(tiny_model_dir: Path, folder: Path, ids: list[int]) -> Path:
    """The student's tokenizer with two of the probe's tokens' ids exchanged: same size, other tokens."""
    from transformers import AutoTokenizer

    folder.mkdir()
    for name in Path(tiny_model_dir).iterdir():
        if name.is_file():
            shutil.copy(name, folder / name.name)
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    a, b = (tokenizer.convert_ids_to_tokens(t) for t in sorted({t for t in ids if t < 40_000})[-2:])
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "vocab.json").unlink(missing_ok=True)
    return folder


def test_a_served_teacher_with_other_tokens_is_refused_naming_both(served, tiny_model_dir, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv(TOKEN_ENV, served.token)
    ids = probe_ids(AutoTokenizer.from_pretrained(str(tiny_model_dir)))
    student = swapped_tokenizer(tiny_model_dir, tmp_path / "student", ids)
    with pytest.raises(ConfigError, match=rf"teacher at {served.base_url} \(model 'teacher'\) does not share the "
                                          rf"student's tokenizer \({student}\): 2 of \d+ probe tokens differ"):
        EndpointTeacher(settings(served), student)
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(ConfigError, match=f"api_key_env='{TOKEN_ENV}', but that environment variable is not set"):
        EndpointTeacher(settings(served), tiny_model_dir)


def test_an_echo_that_would_also_generate_is_a_400_naming_max_tokens(served):
    body = {"model": "teacher", "prompt": [1, 2, 3], "echo": True, "max_tokens": 4, "logprobs": 0}
    request = urllib.request.Request(served.base_url + "/completions", json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {served.token}"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=30)
    assert error.value.code == 400
    detail = json.loads(error.value.read())["error"]
    assert detail["param"] == "max_tokens" and "set max_tokens=0" in detail["message"]


def test_opd_trains_against_a_served_teacher(served, tmp_path, monkeypatch):
    from test_objective_runs import train

    monkeypatch.setenv(TOKEN_ENV, served.token)
    options = ["algorithm=opd", f"learner.teacher.url={served.base_url}", f"learner.teacher.api_key_env={TOKEN_ENV}"]
    first = train(tmp_path / "run", "trainer.iterations=1", *options)[0]
    assert first["train/skipped"] == 0 and first["time/teacher"] > 0
    assert first["adv/teacher_minus_student_abs"] > 1e-3  # a perturbed teacher disagrees with the student
    with pytest.raises(ConfigError, match="a served teacher returns raw .temperature 1. prompt log-probs"):
        train(tmp_path / "hot", "trainer.iterations=1", "agent.sampling.temperature=0.7", *options)
