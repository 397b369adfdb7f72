"""T2PO (token- and turn-level policy optimisation): uncertainty-guided exploration control on top of GiGPO.

The advantage is GiGPO's, unchanged (the paper's B.4). What T2PO changes is how episodes are produced, in its
rollout hooks (`t2po_rollout`):

- the self-calibrated uncertainty of each generated token, M_t = α·H̃_t + (1 − α)·(1 − p_max,t), from the raw
  logits (`engines.interventions.self_calibrated_uncertainty`);
- token-level thinking intervention (TTI): once the thinking has `min_think_tokens` tokens and |M_t − M_{t−1}| < ε
  (`tti_epsilon`) for N (`tti_window`) consecutive tokens, the engine forces `</think>`, newline, `<action>`
  (masked out of the loss) and sampling resumes for the action (`engines.interventions.ThinkPlateauStop`, inside
  vLLM's and transformers' logits processors);
- turn-level dynamic sampling (TDS): s_k = mean M_t over the sampled tokens of turn k, Γ_k = |s_k − s_{k−1}|; a turn
  with 0 < Γ_k < η is discarded (kept as a NOT_TRAINED span) and generated again from the same state, at most
  `max_try` times, the last attempt kept whatever its Γ — the authors' decisions exactly (`tds_regenerates`).

TDS runs while training only (as in the authors' code); TTI is part of the policy's decoding, in eval too.
RFT cold start is a warm-start mode of the trainer (`trainer.warm_start: rft`, `training.rft`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentforge.algorithms.base import ALGORITHMS, check_bool, check_number
from agentforge.algorithms.gigpo import GiGPO, GiGPOConfig
from agentforge.algorithms.t2po_rollout import THINK_QUEUE, T2POHooks, tds_regenerates, think_queue
from agentforge.errors import ConfigError

if TYPE_CHECKING:
    from agentforge.rollout.hooks import RolloutHooks

__all__ = ["THINK_QUEUE", "T2PO", "T2POConfig", "tds_regenerates"]



@dataclass
class T2POConfig(GiGPOConfig):
    """GiGPO's options plus T2PO's. α = 0.4 and max_try = 2 are the paper's; η = 0.3 is the authors' code default
    (`T2PO_multi_turn_loop(eta_threshold=0.3)`); TTI's ε (`tti_epsilon`; GiGPO's `epsilon` stays its std floor),
    window N and min_think_tokens are given by neither: our choices, documented in docs/t2po.md."""

    option_help: ClassVar[dict[str, str]] = {
        **GiGPOConfig.option_help,
        'alpha': "uncertainty mix alpha*H + (1-alpha)*(1-p_max) (the paper's ablation: 0.2, 0.4 best, 0.6, 0.8)",
        'tti': 'token-level thinking intervention (force </think><action> when uncertainty stalls)',
        'tti_epsilon': 'TTI tolerance on |M_t - M_t-1|',
        'tti_window': 'N consecutive small changes',
        'min_think_tokens': 'never cut the thinking before this many tokens',
        'tds': 'turn-level dynamic sampling (regenerate turns whose uncertainty barely moved)',
        'eta': 'TDS threshold on |s_k - s_k-1|',
        'max_try': 'regenerations per turn at most (the last attempt is kept)',
    }


    alpha: float = 0.4
    tti: bool = True
    tti_epsilon: float = 0.05
    tti_window: int = 4
    min_think_tokens: int = 32
    tds: bool = True
    eta: float = 0.3
    max_try: int = 2


@ALGORITHMS.register("t2po")
class T2PO(GiGPO):
    """GiGPO advantages; TTI and TDS in the rollout (see the module doc)."""

    name = "t2po"
    config_class = T2POConfig
    config: T2POConfig

    def validate(self) -> None:
        super().validate()
        c = self.config
        check_number(self.name, "alpha", c.alpha, low=0.0, high=1.0)
        check_number(self.name, "tti_epsilon", c.tti_epsilon, low=0.0)
        check_number(self.name, "eta", c.eta, low=0.0)
        check_bool(self.name, "tti", c.tti)
        check_bool(self.name, "tds", c.tds)
        for option, low in (("tti_window", 1), ("min_think_tokens", 0), ("max_try", 0)):
            value = getattr(c, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"algorithm 't2po': {option}={value!r} must be an integer >= {low}")

    def check_run(self, run: dict[str, Any]) -> None:
        """TTI needs the in-process engine (its logits processor shares the process), no second decoding
        intervention, and a tokenizer that encodes the forced queue back to the same text."""
        c = self.config
        if not c.tti:
            return
        engine = run.get("engine", {})
        if engine.get("name") == "vllm" and not engine.get("in_process", True):
            raise ConfigError("algorithm.tti=true forces tokens inside the engine's logits processor, which needs "
                              "the in-process vLLM engine: set engine.in_process=true (or engine=hf), or "
                              "algorithm.tti=false")
        if run.get("agent", {}).get("intervention"):
            raise ConfigError("algorithm.tti=true is T2PO's decoding intervention and the run also sets "
                              "agent.intervention: one intervention per turn; set agent.intervention=null or "
                              "algorithm.tti=false")
        if "model" in run:
            from agentforge.agent.prompts import prompt_for

            env = run.get("env", {}).get("name")
            action_tag = prompt_for(str(env)).action_tag if env else "action"
            check_think_queue(run["model"], think_queue(action_tag))

    def rollout_hooks(self, purpose: str) -> RolloutHooks:
        return T2POHooks(self.config, tds=self.config.tds and purpose == "train")


def check_think_queue(model: dict[str, Any], queue: str = THINK_QUEUE) -> None:
    """The forced queue must round-trip through the model's tokenizer (else the parser would not see the tags)."""
    from agentforge.models.loading import load_tokenizer, resolve_model

    tokenizer = load_tokenizer(resolve_model(model))
    ids = tokenizer.encode(queue, add_special_tokens=False)
    back = tokenizer.decode(ids, skip_special_tokens=False)
    if not ids or back != queue:
        raise ConfigError(f"TTI forces {queue!r}, but this model's tokenizer encodes it as {ids}, which decodes to "
                          f"{back!r}: the parser would not find the tags. Use a model whose tokenizer round-trips "
                          "it, or set algorithm.tti=false")
