"""WebShop's search engine: BM25 over products (k1 0.9, b 0.4 as the original's Lucene index), top 50 hits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from agentforge.envs.bm25 import BM25Index


class Searchable(Protocol):
    """What the index needs of a product (the catalog's `Product`; kept abstract so the catalog can own a search)."""

    def search_text(self) -> str: ...


P = TypeVar("P", bound=Searchable)

SEARCH_RETURN_N = 50  # the original returns at most 50 products per query
K1, B = 0.9, 0.4


class ProductSearch(Generic[P]):
    """Ranks products for a keyword query; products no query term matches are not returned."""

    def __init__(self, products: Sequence[P]) -> None:
        self.products = list(products)
        self._index = BM25Index([p.search_text() for p in self.products], k1=K1, b=B)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[P]:
        return [self.products[i] for i, _ in self._index.search(query, k)]
