"""TrajEvolve's step discriminator: "is this step necessary?", learned online from the replay labels.

Why: replay labels exist only for won episodes of envs that replay; the discriminator carries what they teach to the
other steps (failures, diverged episodes). Our choice among the issue's two options: a separate small model, not a
head on the policy — a logistic regression over the frozen all-MiniLM-L6-v2 embedding (shipped in a package, no hub
download; the same model StraTA selects strategies with) of "action: <a> | state: <observation>" (action first: the
embedding model keeps its first 256 tokens), plus the step's relative position t/T and a bias. It never touches the
policy's weights, costs one embedding per step, and its accuracy is measured on labels it has not been trained on.

Training: the labelled steps of each iteration are first scored (held-out accuracy: overall and on each class),
then added to a FIFO buffer of `buffer_size` steps, and the weights are refitted from their current values by
`epochs` steps of full-batch gradient descent on the L2-regularised, class-balanced logistic loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentforge.algorithms.strategy_selection import BUNDLED_MODEL, StrategyEmbedder
from agentforge.types import Trajectory

OBSERVATION_CHARS = 600  # the embedding model reads ~256 tokens; longer observations are cut here first


@dataclass
class DiscriminatorScore:
    """Accuracy of predictions against labels the discriminator was not trained on."""

    steps: int
    correct: int
    necessary: int
    necessary_correct: int
    redundant: int
    redundant_correct: int


class StepDiscriminator:
    """Logistic regression on step embeddings (see the module doc); `predict` is P(necessary) > 0.5."""

    def __init__(self, embedder: StrategyEmbedder | None = None, buffer_size: int = 4096, epochs: int = 100,
                 lr: float = 1.0, l2: float = 1e-3) -> None:
        self.embedder = embedder or StrategyEmbedder(BUNDLED_MODEL)
        self.buffer_size, self.epochs, self.lr, self.l2 = buffer_size, epochs, lr, l2
        self.weights: np.ndarray | None = None
        self._x = np.zeros((0, 0))
        self._y = np.zeros(0)

    def state_dict(self) -> dict[str, Any]:
        """The weights and the label buffer (refits continue from both after a resume)."""
        return {"weights": self.weights, "x": self._x, "y": self._y}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights, self._x, self._y = state["weights"], state["x"], state["y"]

    @property
    def trained(self) -> bool:
        return self.weights is not None

    def features(self, trajectory: Trajectory, turns: Sequence[int]) -> np.ndarray:
        """One row per listed turn: the embedding, t/T and a bias term."""
        if not turns:
            return np.zeros((0, 0))
        texts = [f"action: {trajectory.turns[k].action} | state: {trajectory.turns[k].observation[:OBSERVATION_CHARS]}"
                 for k in turns]
        position = np.asarray([(k + 1) / trajectory.length for k in turns])[:, None]
        return np.hstack([self.embedder.encode(texts), position, np.ones_like(position)])

    def probability(self, x: np.ndarray) -> np.ndarray:
        if self.weights is None or x.size == 0:
            return np.full(len(x), 0.5)
        return 1.0 / (1.0 + np.exp(-np.clip(x @ self.weights, -30, 30)))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """True = necessary."""
        return self.probability(x) > 0.5

    def score(self, x: np.ndarray, y: np.ndarray) -> DiscriminatorScore:
        predicted = self.predict(x)
        y = y.astype(bool)
        return DiscriminatorScore(len(y), int((predicted == y).sum()), int(y.sum()), int((predicted & y).sum()),
                                  int((~y).sum()), int((~predicted & ~y).sum()))

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        """Add labelled steps to the buffer (oldest dropped past `buffer_size`) and refit."""
        if x.size == 0:
            return
        self._x = x if self._x.size == 0 else np.vstack([self._x, x])[-self.buffer_size:]
        self._y = np.concatenate([self._y, y.astype(np.float64)])[-self.buffer_size:]
        if self.weights is None:
            self.weights = np.zeros(self._x.shape[1])
        positives = self._y.mean()
        if positives in (0.0, 1.0):  # one class so far: the bias says it, nothing else to learn
            self.weights[:] = 0.0
            self.weights[-1] = 5.0 if positives == 1.0 else -5.0
            return
        balance = np.where(self._y == 1.0, 0.5 / positives, 0.5 / (1.0 - positives))  # each class weighs half
        for _ in range(self.epochs):
            p = 1.0 / (1.0 + np.exp(-np.clip(self._x @ self.weights, -30, 30)))
            gradient = self._x.T @ (balance * (p - self._y)) / len(self._y) + self.l2 * self.weights
            self.weights -= self.lr * gradient
