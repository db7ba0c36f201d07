"""Full-text product search: an in-memory SQLite FTS5 index ranked by BM25.

One connection is shared by every server thread behind a lock; a query over 10,000 products takes
about a millisecond, so the lock is not a bottleneck next to HTTP handling.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence

from budget_envs.envs.webshop.catalogue import Product

__all__ = ["MAX_RESULTS", "SearchIndex", "query_terms"]

#: Results per query, as in WebShop (5 pages of 10).
MAX_RESULTS = 50
_MAX_TERMS = 24
#: Terms found in more than this share of products are dropped from a query with rarer terms.
COMMON_SHARE = 0.08
_CACHE_SIZE = 4096
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be but by for from i im in is it its looking me my need of on or "
    "please price than that the this to want with would lower dollars less under".split()
)


def query_terms(query: str) -> list[str]:
    """The distinct search terms of ``query``: lowercase alphanumeric words minus stop words."""
    terms: list[str] = []
    for tok in _TOKEN.findall(query.lower()):
        if tok not in _STOP and tok not in terms:
            terms.append(tok)
            if len(terms) >= _MAX_TERMS:
                break
    return terms


class SearchIndex:
    """BM25 search over titles, types, attributes and features of a product list."""

    def __init__(self, products: Sequence[Product]) -> None:
        self._products = products
        self._lock = threading.Lock()
        self._cache: dict[tuple, tuple[int, ...]] = {}
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(title, kind, attrs, features, "
            "tokenize = 'unicode61')"
        )
        conn.executemany(
            "INSERT INTO docs(rowid, title, kind, attrs, features) VALUES (?, ?, ?, ?, ?)",
            (
                (
                    i,
                    p.title,
                    p.spec.noun + " " + p.spec.category + " " + " ".join(p.spec.path),
                    " ".join(p.attributes),
                    " ".join(p.bullets),
                )
                for i, p in enumerate(products)
            ),
        )
        conn.execute("INSERT INTO docs(docs) VALUES ('optimize')")
        conn.execute("CREATE VIRTUAL TABLE vocab USING fts5vocab(docs, 'row')")
        self._df = dict(conn.execute("SELECT term, doc FROM vocab").fetchall())
        conn.commit()
        self._conn = conn
        self._common = max(50, int(len(products) * COMMON_SHARE))

    def _prune(self, terms: list[str]) -> list[str]:
        """Drop very common terms when rarer ones exist (tiny BM25 weight, large cost)."""
        known = [t for t in terms if t in self._df]
        rare = [t for t in known if self._df[t] <= self._common]
        if rare:
            return rare
        return sorted(known, key=lambda t: (self._df[t], t))[:1]

    def search(self, query: str, limit: int = MAX_RESULTS) -> list[int]:
        """Indices of the best ``limit`` products for ``query`` (ties broken by index)."""
        terms = tuple(self._prune(query_terms(query)))
        if not terms:
            return []
        with self._lock:
            hit = self._cache.get((terms, limit))
            if hit is not None:
                return list(hit)
        match = " OR ".join(f'"{t}"' for t in terms)
        with self._lock:
            rows = self._conn.execute(
                "SELECT rowid FROM docs WHERE docs MATCH ? "
                "ORDER BY bm25(docs, 6.0, 3.0, 2.0, 1.0), rowid LIMIT ?",
                (match, int(limit)),
            ).fetchall()
            result = tuple(r[0] for r in rows)
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[(terms, limit)] = result
        return list(result)

    def close(self) -> None:
        """Close the SQLite connection."""
        with self._lock:
            self._conn.close()
