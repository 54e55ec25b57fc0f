"""``--shard K/N`` (tests/conftest.py): a GPU section too long for one lent-GPU call runs as N calls, which together
select every test once."""

from __future__ import annotations

import pytest

from .conftest import shard_of


def test_the_shards_cover_every_item_once_in_order() -> None:
    items = list(range(11))
    shards = [shard_of(items, f"{k}/3") for k in (1, 2, 3)]
    assert shards[0] == [0, 3, 6, 9] and sorted(sum(shards, [])) == items
    assert shard_of(items, "1/1") == items


@pytest.mark.parametrize("text", ["2", "a/b", "0/2", "3/2", "1/0"])
def test_a_malformed_shard_is_a_usage_error(text: str) -> None:
    with pytest.raises(pytest.UsageError, match="--shard"):
        shard_of([1, 2], text)
