"""`agentforge export` on real tiny training runs (full weights and LoRA): the folder loads with plain transformers
and with vLLM, generates greedily the very tokens the trainer's engine generates on that checkpoint, carries its
model card, and bad input is refused by name. `agentforge serve` on the export: the `openai` client and the
example search agent against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

from agentforge.types import SamplingConfig, Task

pytestmark = pytest.mark.integration

AGENTFORGE = [sys.executable, "-m", "agentforge.cli"]
# the tiny model on the HF engine, local envs, 1 iteration with an eval before and after, a checkpoint after it
TRAIN = [
    "recipe=debug", "engine=hf", "env_pool.kind=local", "logger.wandb=false", "agent.max_turns=2",
    "agent.sampling.max_new_tokens=16", "trainer.iterations=1", "trainer.tasks_per_iteration=2",
    "trainer.group_size=2", "trainer.eval_tasks=2", "trainer.eval_group_size=2", "trainer.eval_every=1",
    "trainer.eval_before=true", "trainer.checkpoint_every=1", "learner.lr=1e-2", "model.dtype=float32",
    "learner.dtype=float32", "engine.dtype=float32",
]
KINDS = {"full": [], "lora": ["learner.lora.enabled=true"]}
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=24)


def run_cli(*args: str, cwd: Path, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), **(env or {})}
    return subprocess.run([*AGENTFORGE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def cli_in_process(capsys, *args: str) -> tuple[int, str]:
    """`agentforge <args>` through the CLI's own `main` in this process: its exit status and stderr. For refusals,
    which need no process of their own (each subprocess start costs seconds of imports); the exports that write
    a model run as real CLI processes."""
    from agentforge.cli import main

    capsys.readouterr()
    try:
        status = main(list(args))
    except SystemExit as stop:
        status = int(stop.code or 0)
    return status, capsys.readouterr().err


def cli_main(*args: str) -> tuple[int, str, str]:
    """`agentforge <args>` through the CLI's own `main` in this process: status, stdout, stderr (as the real command
    prints them). Saves a process start (seconds of imports) where the process itself is not what is tested."""
    import contextlib
    import io

    from agentforge.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as stop:
            status = int(stop.code or 0)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A full-weight and a LoRA run, each exported into <run>/export/iter_000001. The LoRA run is a real `agentforge
    train` process (its card names the command that reproduces it) exported through the CLI's main here; the
    full run is trained in this process (the same trainer) and exported by a real `agentforge export` process."""
    from agentforge.commands.train import build_trainer
    from agentforge.schema.compose import compose_config

    root = tmp_path_factory.mktemp("export_runs")
    out = {}
    for kind, extra in KINDS.items():
        if kind == "full":
            build_trainer(compose_config(["command=train", *TRAIN, *extra], run_dir=str(root / kind))).fit()
            exported = run_cli("export", str(root / kind), cwd=root, timeout=300)
            status, stdout, stderr = exported.returncode, exported.stdout, exported.stderr
        else:
            done = run_cli("train", *TRAIN, *extra, f"hydra.run.dir={root / kind}", cwd=root)
            assert done.returncode == 0, done.stderr[-4000:]
            status, stdout, stderr = cli_main("export", str(root / kind))
        assert status == 0, stderr[-4000:]
        assert f"checkpoint {root / kind}/checkpoints/iter_000001 (iteration 1" in stdout
        assert f"→ {root / kind}/export/iter_000001" in stdout
        out[kind] = root / kind
    return out


def export_dir(run: Path) -> Path:
    return run / "export" / "iter_000001"


def eval_prompts(tokenizer, count: int = 3) -> list[list[int]]:
    """The first-turn prompts of the run's eval tasks (the trainer renders them this way)."""
    from agentforge.agent.prompts import prompt_for
    from agentforge.agent.render import AgentConfig, render_turn_prompt
    from agentforge.envs.base import make_env
    from agentforge.tasks import TaskSampler

    env = make_env("sokoban")
    prompts = []
    for task in TaskSampler("sokoban", "eval").sample(count):
        observation = env.reset(task)
        prompts.append(render_turn_prompt(prompt_for("sokoban"), tokenizer, AgentConfig(), observation, [], 1, task))
    env.close()
    return prompts


def trainers_engine(name: str, run: Path):
    """The engine as the trainer has it on the checkpoint: built on the base model, the checkpoint's weights pushed
    (LoRA merged by the learner's own code)."""
    from agentforge.engines import make_engine
    from agentforge.evaluation.checkpoint_source import load_checkpoint_weights, resolve_checkpoint
    from agentforge.models.loading import ModelSpec

    source = resolve_checkpoint(run)
    learner_meta = json.loads((source.path / "learner" / "learner.json").read_text())
    base = learner_meta["model_path"]
    engine = make_engine(name, ModelSpec(path=base, name="base", dtype="float32"), engine_options(name))
    engine.update_weights(load_checkpoint_weights(source, fallback_base=base))
    return engine


def engine_options(name: str) -> dict:
    return {"dtype": "float32", "kv_cache_space_gb": 0.25, "max_model_len": 1024} if name == "vllm" else {
        "dtype": "float32"}


def exported_engine(name: str, folder: Path):
    from agentforge.engines import make_engine
    from agentforge.models.loading import ModelSpec

    return make_engine(name, ModelSpec(path=str(folder), name="export", dtype="float32"), engine_options(name))


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_export_holds_the_weights_the_trainer_pushed(runs, kind):
    """Every tensor of the exported model equals the learner's export of the checkpoint (what the engine got)."""
    from safetensors.torch import load_file

    from agentforge.evaluation.checkpoint_source import load_checkpoint_weights, resolve_checkpoint

    source = resolve_checkpoint(runs[kind])
    pushed = dict(load_checkpoint_weights(source, fallback_base="unused"))
    exported = load_file(str(export_dir(runs[kind]) / "model.safetensors"))
    assert set(exported) <= set(pushed) and "model.embed_tokens.weight" in exported
    for name, tensor in exported.items():
        assert torch.equal(tensor, pushed[name]), name


@pytest.mark.parametrize("kind", list(KINDS))
def test_greedy_generations_are_token_identical_to_the_trainers_engine(runs, kind, tiny_tokenizer):
    """On the run's eval prompts: the trainer's engines (HF and vLLM, checkpoint pushed) against the export loaded
    by plain transformers and by vLLM."""
    from transformers import AutoModelForCausalLM

    prompts = eval_prompts(tiny_tokenizer)
    folder = export_dir(runs[kind])
    reference = trainers_engine("hf", runs[kind])
    expected = [c.token_ids for c in reference.generate(prompts, GREEDY)]
    reference.close()
    assert all(len(ids) > 0 for ids in expected)

    model = AutoModelForCausalLM.from_pretrained(folder)  # plain transformers, nothing of agentforge
    for prompt, ids in zip(prompts, expected, strict=True):
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=GREEDY.max_new_tokens)
        generated = out[0, len(prompt):].tolist()
        assert generated[:len(ids)] == ids
    for name in ("hf", "vllm"):
        trainer = trainers_engine(name, runs[kind]) if name == "vllm" else None
        engine = exported_engine(name, folder)
        try:
            got = [c.token_ids for c in engine.generate(prompts, GREEDY)]
            assert got == expected, name
            if trainer is not None:
                assert [c.token_ids for c in trainer.generate(prompts, GREEDY)] == expected
        finally:
            engine.close()
            if trainer is not None:
                trainer.close()


def test_the_folder_is_self_contained_with_the_runs_sampling_and_card(runs):
    from transformers import AutoTokenizer, GenerationConfig

    folder = export_dir(runs["lora"])
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
            "README.md", "agentforge_export.json"} <= names
    assert "adapter_config.json" not in names  # merged
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert "<|im_start|>" in tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    generation = GenerationConfig.from_pretrained(folder)
    assert generation.max_new_tokens == 16 and generation.do_sample and generation.temperature == 1.0
    card = (folder / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "transformers" and "grpo" in front["tags"]
    assert "| iterations trained | 1 of 1 |" in card and "| episodes trained | 4 |" in card
    assert "| iteration 0 | 4 |" in card and "| iteration 1 | 4 |" in card  # the eval table, with intervals
    assert "% [0.0%, " in card and "changed within noise" in card
    summary = json.loads((runs["lora"] / "summary.json").read_text())
    for record in summary.get("verdicts") or []:  # the paired verdicts, where the trainer writes them
        assert f"- {record['text']}" in card
    assert "learner.lora` | rank 16" in card and "| agentforge | 0.1.0 |" in card
    command = card.split("```bash\n")[1].split("\n")[0]
    assert command.startswith("agentforge train recipe=debug engine=hf") and "learner.lora.enabled=true" in command
    meta = json.loads((folder / "agentforge_export.json").read_text())
    assert meta["source"]["iteration"] == 1 and meta["source"]["lora"] and meta["dtype"] == "float32"


def test_adapter_only_and_another_dtype(runs, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "adapter"
    status, _, stderr = cli_main("export", str(runs["lora"]), f"out={out}", "adapter_only=true", "dtype=bf16")
    assert status == 0, stderr[-3000:]
    config = json.loads((out / "adapter_config.json").read_text())
    base = json.loads((runs["lora"] / "checkpoints/iter_000001/learner/learner.json").read_text())["model_path"]
    assert config["base_model_name_or_path"] == base and "model.safetensors" not in {p.name for p in out.iterdir()}
    assert {t.dtype for t in load_file(str(out / "adapter_model.safetensors")).values()} == {torch.bfloat16}
    assert "library_name: peft" in (out / "README.md").read_text()
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(out))  # loads on its base

    full = tmp_path / "bf16"
    status, _, stderr = cli_main("export", str(runs["full"] / "checkpoints" / "iter_000001"), f"out={full}",
                                 "dtype=bf16")
    assert status == 0, stderr[-3000:]
    assert json.loads((full / "config.json").read_text())["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(str(full / "model.safetensors")).values()} == {torch.bfloat16}


def test_bad_input_is_refused_by_name_with_the_fix(runs, tmp_path, capsys):
    import shutil

    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("x")
    moved = tmp_path / "moved"
    shutil.copytree(runs["lora"], moved, ignore=shutil.ignore_patterns("export"))
    meta_file = moved / "checkpoints/iter_000001/learner/learner.json"
    meta = json.loads(meta_file.read_text())
    base = meta["model_path"]
    meta_file.write_text(json.dumps({**meta, "model_path": str(tmp_path / "gone")}))
    cases = [
        ([str(tmp_path / "stuff")], 1, "is not a checkpoint: no checkpoints/, trainer_state.json or model/"),
        ([str(tmp_path / "nope")], 1, "no such directory; expected a train run dir"),
        ([str(moved)], 1, "whose base model " + str(tmp_path / "gone") + " is missing"),
        ([str(runs["full"]), f"out={tmp_path / 'stuff'}"], 1, "exists and is not empty: nothing was written"),
        ([str(runs["full"]), "adapter_only=true", f"out={tmp_path / 'a'}"], 1, "holds full weights, not a LoRA"),
        ([str(runs["full"]), "dtype=int8"], 2, "valid dtypes: bf16, fp16, fp32"),
        ([str(runs["full"]), "outdir=x"], 2, "unknown option 'outdir'; valid options: out="),
        ([str(export_dir(runs["full"]))], 1, "is already an exported model"),
    ]
    for args, status, message in cases:
        got, stderr = cli_in_process(capsys, "export", *args)
        assert got == status and message in stderr, (args, stderr[-2000:])
    assert "base=<HF folder" in cli_in_process(capsys, "export", str(moved))[1]
    assert not (tmp_path / "a").exists() and [p.name for p in (tmp_path / "stuff").iterdir()] == ["notes.txt"]
    status, _, stderr = cli_main("export", str(moved), f"base={base}", f"out={tmp_path / 'rebased'}")
    assert status == 0 and (tmp_path / "rebased" / "model.safetensors").is_file(), stderr[-2000:]


def test_push_to_hub_is_refused_without_a_token_and_without_a_network(runs, tmp_path):
    """No hub is reachable here: only the refusals are testable (docs/export.md says so)."""
    env = {"HF_HOME": str(tmp_path / "hf_home"), "HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": ""}
    out = tmp_path / "pushed"
    done = run_cli("export", str(runs["full"]), f"out={out}", "push_to_hub=me/agent", cwd=tmp_path, env=env,
                   timeout=120)
    assert done.returncode == 1 and "no Hugging Face token found, nothing was exported" in done.stderr
    assert not out.exists()
    env = {**env, "HF_TOKEN": "hf_not_a_real_token", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2"}
    done = run_cli("export", str(runs["full"]), f"out={out}", "push_to_hub=me/agent", cwd=tmp_path, env=env,
                   timeout=300)
    assert done.returncode == 1 and "push_to_hub=me/agent failed" in done.stderr, done.stderr[-2000:]
    assert f"The export itself is complete in {out}" in done.stderr and (out / "model.safetensors").is_file()


# ------------------------------------------------------------------------------------------------------ serve


@pytest.fixture(scope="module")
def served(runs):
    """The LoRA run's export served by the transformers engine, in this process."""
    from agentforge.commands.serve import ServeModel, build_engine, sampling_of
    from agentforge.serving.server import start

    folder = export_dir(runs["lora"])
    model = ServeModel(folder, json.loads((folder / "agentforge_export.json").read_text()))
    engine = build_engine(model, "hf", "float32", 1024, 0.25)
    server = start(engine, engine.tokenizer, sampling_of(model.meta, {"max_tokens": "24"}), folder,
                   "agentforge-policy", 1024, token="secret")
    yield server
    server.close()


def test_the_openai_client_gets_the_engines_greedy_tokens_and_the_training_prompt(served, runs, tiny_tokenizer):
    from openai import AuthenticationError, BadRequestError, OpenAI

    from agentforge.gateway.examples.search_tools import TOOLS
    from agentforge.gateway.rendering import ChatRenderer

    client = OpenAI(base_url=served.base_url, api_key="secret", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["agentforge-policy"]
    messages = [{"role": "system", "content": "You answer with tools."}, {"role": "user", "content": "Who is X?"}]
    reply = client.chat.completions.create(model="agentforge-policy", messages=messages, tools=TOOLS,
                                           temperature=0, max_tokens=12, logprobs=True)
    prompt = ChatRenderer(tiny_tokenizer).fresh(messages, TOOLS).ids  # the gateway's rendering, as in training
    assert "<tools>" in tiny_tokenizer.decode(prompt)  # Hermes tool definitions in the system turn
    assert reply.usage.prompt_tokens == len(prompt)
    reference = trainers_engine("hf", runs["lora"])
    expected = reference.generate([prompt], SamplingConfig(temperature=0.0, max_new_tokens=12))[0]
    reference.close()
    assert [t.token for t in reply.choices[0].logprobs.content] == [tiny_tokenizer.decode([t])
                                                                    for t in expected.token_ids]
    again = client.chat.completions.create(model="agentforge-policy", messages=messages, tools=TOOLS,
                                           temperature=0, max_tokens=12)
    assert again.choices[0].message.content == reply.choices[0].message.content  # nothing kept between requests
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=served.base_url, api_key="wrong", max_retries=0).models.list()
    with pytest.raises(BadRequestError, match="temperature"):
        client.chat.completions.create(model="agentforge-policy", messages=messages, temperature=7)


def test_concurrent_clients_are_answered_each_as_alone(served):
    import asyncio

    from openai import AsyncOpenAI

    async def ask(client: AsyncOpenAI, text: str) -> str:
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}],
                                                     temperature=0, max_tokens=8)
        return reply.choices[0].message.content

    async def main() -> tuple[list[str], list[str]]:
        client = AsyncOpenAI(base_url=served.base_url, api_key="secret", max_retries=0)
        questions = [f"question {i}" for i in range(4)]
        together = await asyncio.gather(*(ask(client, q) for q in questions))
        alone = [await ask(client, q) for q in questions]
        await client.close()
        return list(together), alone

    together, alone = asyncio.run(main())
    assert together == alone


def test_the_example_search_agent_runs_against_the_served_policy(served):
    from agentforge.gateway.agent_env import AgentTask
    from agentforge.gateway.examples.openai_search import run

    before = served.server.registry._count
    task = AgentTask(task=Task(env="search_qa", seed=0, split="eval"), session_id="-", rollout_index=0,
                     env_name="search_qa")
    import asyncio

    outcome = asyncio.run(run(task, served.base_url, served.token))
    assert set(outcome) == {"reward", "won"} and isinstance(outcome["reward"], float)
    assert served.server.registry._count > before  # its calls reached the server


def test_serve_command_listens_on_loopback_and_stops_on_sigterm(runs, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    token = "t0k-long-enough-to-guard"
    process = subprocess.Popen([*AGENTFORGE, "serve", str(runs["full"]), "engine=hf", "port=0", f"token={token}"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [process.stdout.readline()]  # other software (DeepSpeed's accelerator notice) may print first
        while not lines[-1].startswith("serving ") and lines[-1] and len(lines) < 50:
            lines.append(process.stdout.readline())
        line = lines[-1]
        assert line.startswith("serving ") and " at http://127.0.0.1:" in line, lines
        base_url = line.split(" at ")[1].strip()
        request = urllib.request.Request(f"{base_url}/models", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["data"][0]["id"] == "agentforge-policy"
    finally:
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=60)
    assert status == 0
    assert "serving checkpoint" in process.stderr.read()  # a run dir is exported to a temporary folder first
    shown = "".join(lines) + process.stdout.read()
    assert token not in shown and "OPENAI_API_KEY=(the token you gave)" in shown  # a given token is never printed


def test_serve_on_vllm_answers_what_the_transformers_server_answers(served, runs):
    """The same export behind the vLLM engine: the same greedy reply (fp32) through the same server."""
    from openai import OpenAI

    from agentforge.commands.serve import ServeModel, build_engine, sampling_of
    from agentforge.serving.server import start

    folder = export_dir(runs["lora"])
    model = ServeModel(folder, json.loads((folder / "agentforge_export.json").read_text()))
    engine = build_engine(model, "vllm", "float32", 1024, 0.25)
    on_vllm = start(engine, engine.tokenizer, sampling_of(model.meta, {}), folder, "agentforge-policy", 1024)
    try:
        messages = [{"role": "user", "content": "Push the box onto the target."}]
        replies = [OpenAI(base_url=s.base_url, api_key=s.token, max_retries=0).chat.completions.create(
            model="agentforge-policy", messages=messages, temperature=0, max_tokens=12) for s in (served, on_vllm)]
        assert replies[0].choices[0].message.content == replies[1].choices[0].message.content
        assert replies[0].usage == replies[1].usage
    finally:
        on_vllm.close()
