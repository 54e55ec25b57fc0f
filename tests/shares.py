"""K/N interleaved shares of a list: how a GPU check too long for one lent-GPU call is split into N calls, for
pytest's ``--shard`` (tests/conftest.py) and ``benchmarks/concurrent_evals.py --part`` alike."""

from __future__ import annotations


def parse_share(text: str, option: str) -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N; otherwise ValueError, its message naming ``option``."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"{option} wants K/N (such as 1/2), not {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"{option} {text}: K must be between 1 and N")
    return k, n


def share(items: list, part: tuple[int, int]) -> list:
    """The K-th of N interleaved shares of ``items`` (``part`` = (K, N), K from 1): every N-th, from the K-th."""
    k, n = part
    return items[k - 1::n]
