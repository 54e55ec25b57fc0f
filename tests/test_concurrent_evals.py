"""benchmarks/concurrent_evals.py's ``--part K/N`` (issue 36's two concurrent runs, split over device calls):
the N parts of a list cover every item exactly once, and a malformed part is refused in one line."""

from __future__ import annotations

import argparse

import pytest

from .conftest import repo_script

bench = repo_script("benchmarks/concurrent_evals.py")


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_the_parts_cover_every_item_once(n: int) -> None:
    items = list(range(57))
    parts = [bench.share(items, (k, n)) for k in range(1, n + 1)]
    assert sorted(x for part in parts for x in part) == items
    assert max(map(len, parts)) - min(map(len, parts)) <= 1, "shares of one size, give or take one"


def test_a_part_is_parsed_or_refused() -> None:
    assert bench.parse_part("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "1", "a/b", "1/2/3"):
        with pytest.raises(argparse.ArgumentTypeError, match="--part"):
            bench.parse_part(bad)
