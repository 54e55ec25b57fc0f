"""The mla_decode_paged reference's consumer loop and its scores_ahead variant (benchmarks/variants), run as
schedules against a model of the shared-memory buffers they share: the 2-stage mbarrier ring filled by the
producer, the Q slabs reloaded at each segment's start, the single P tile and the named barriers between the two
consumer warpgroups. A wgmma reads its operands from issue to wait, and other agents run in between, in random
interleavings: every read must see the tile (or sequence) it was issued for until its wait, no buffer may be
overwritten while a read of it is open, and no interleaving may deadlock. The arithmetic is
tests/test_reference_mla_model.py's; this is only the order of the steps, as the two sources write it."""

from __future__ import annotations

import random
from collections.abc import Generator

import pytest

from .test_reference_mla_model import STAGES, walk

Step = Generator[str, None, None]


class World:
    """Shared memory and barriers. Buffers hold the id of what was last written; reads are open intervals."""

    def __init__(self) -> None:
        self.stage: list[object] = [None] * STAGES
        self.full = [0] * STAGES    # completed phases
        self.empty = [0] * STAGES   # completed phases (8 warps' arrivals each; a warpgroup arrives as one here)
        self.empty_count = [0] * STAGES
        self.q: object = None
        self.q_loads = 0
        self.p: object = None
        self.reads: list[tuple[str, int, object]] = []  # (buffer, index, what the reader expects)
        self.barrier: dict[str, int] = {}  # named barrier -> arrivals in the current generation
        self.generation: dict[str, int] = {}

    def write(self, buffer: str, index: int, value: object) -> None:
        for name, at, _ in self.reads:
            assert (name, at) != (buffer, index), f"{buffer}[{index}] overwritten while read"
        if buffer == "stage":
            self.stage[index] = value
        elif buffer == "q":
            self.q = value
        else:
            self.p = value

    def value(self, buffer: str, index: int) -> object:
        return self.stage[index] if buffer == "stage" else self.q if buffer == "q" else self.p

    def open(self, buffer: str, index: int, expected: object) -> tuple[str, int, object]:
        read = (buffer, index, expected)
        assert self.value(buffer, index) == expected, f"{buffer}[{index}] holds {self.value(buffer, index)}"
        self.reads.append(read)
        return read

    def close(self, read: tuple[str, int, object]) -> None:
        assert self.value(read[0], read[1]) == read[2], f"{read[0]}[{read[1]}] changed under its read"
        self.reads.remove(read)

    def sync(self, name: str) -> Step:
        """A named barrier of the two warpgroups."""
        generation = self.generation.get(name, 0)
        self.barrier[name] = self.barrier.get(name, 0) + 1
        if self.barrier[name] == 2:
            self.barrier[name] = 0
            self.generation[name] = generation + 1
        while self.generation.get(name, 0) == generation:
            yield f"wait {name}"


def producer(world: World, tiles: list[dict]) -> Step:
    for i, w in enumerate(tiles):
        stage, uses = i % STAGES, i // STAGES
        while world.empty[stage] < uses:  # the stage's previous tile released
            yield "wait empty"
        world.write("stage", stage, w["tile"])
        yield "copy"
        world.full[stage] += 1


def consumer(world: World, tiles: list[dict], wg: int, ahead: bool, blind: bool = False) -> Step:
    """One warpgroup's loop: the reference's (ahead = False) or the scores_ahead variant's."""
    def wait_full(i: int) -> Step:
        while world.full[i % STAGES] <= i // STAGES:
            yield "wait full"

    def load_q(w: dict) -> Step:
        yield from world.sync("q")
        if wg == 0:
            world.write("q", 0, w["b"])
            world.q_loads += 1
        loads = world.q_loads if wg == 0 else None
        while world.q != w["b"] or (loads is None and world.q_loads == 0):
            yield "wait q"

    def release(i: int) -> None:
        stage = i % STAGES
        world.empty_count[stage] += 1
        if world.empty_count[stage] == 2:
            world.empty_count[stage] = 0
            world.empty[stage] += 1

    issued: list[tuple[str, int, object]] = []  # the reads of an S issued one tile early
    for i, w in enumerate(tiles):
        stage = i % STAGES
        if not issued:
            if w["seg_start"]:
                yield from load_q(w)
            yield from wait_full(i)
            reads = [world.open("stage", stage, w["tile"]), world.open("q", 0, w["b"])]
            yield "S in flight"
            for r in reads:
                world.close(r)
        else:
            reads, issued = issued, []
            for r in reads:  # waited for with the last tile's P · V
                world.close(r)
        nxt = tiles[i + 1] if i + 1 < len(tiles) else None
        if ahead and nxt is not None and (blind or not nxt["seg_start"]):
            yield from wait_full(i + 1)
            issued = [world.open("stage", (i + 1) % STAGES, nxt["tile"]), world.open("q", 0, nxt["b"])]
        yield "softmax"
        yield from world.sync("max")
        world.write("p", wg, (w["tile"],))  # each warpgroup writes its half of the one P tile
        yield from world.sync("p")
        pv = [world.open("p", 0, (w["tile"],)), world.open("stage", stage, w["tile"])]
        yield "PV in flight"
        for r in pv:
            world.close(r)
        if issued:  # the same wait covers the early S: its reads stay open until the loop's next turn
            yield "S ahead done"
        release(i)
        if w["ends"]:
            yield from world.sync("sum")


class PWorld(World):
    """One P tile written in two halves: a half may not change while either warpgroup's P · V reads the tile."""

    def write(self, buffer: str, index: int, value: object) -> None:
        if buffer == "p":
            for name, _, _ in self.reads:
                assert name != "p", "P overwritten while a P · V reads it"
            self.p_halves[index] = value
            self.p = value if self.p_halves[0] == self.p_halves[1] else ("mixed",)
            return
        super().write(buffer, index, value)

    def __init__(self) -> None:
        super().__init__()
        self.p_halves: list[object] = [None, None]


def run(tiles: list[dict], ahead: bool, seed: int, blind: bool = False) -> None:
    world = PWorld()
    agents = [producer(world, tiles), consumer(world, tiles, 0, ahead, blind),
              consumer(world, tiles, 1, ahead, blind)]
    rng = random.Random(seed)
    live = list(range(3))
    stalled = 0
    while live:
        k = rng.choice(live)
        try:
            note = next(agents[k])
        except StopIteration:
            live.remove(k)
            stalled = 0
            continue
        stalled = stalled + 1 if note.startswith("wait") else 0
        assert stalled < 10_000, "deadlock"
    assert not world.reads and world.empty == [len(tiles[s::STAGES]) for s in range(STAGES)]


LAYOUTS = {  # (indptr, last_len, P, t0, t1): a chunk's tiles
    "one-sequence": ([0, 9], [5], 64, 0, 9),
    "three-segments": ([0, 2, 3, 7], [64, 1, 30], 64, 1, 7),
    "short-sequences": ([0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], 1, 0, 6),
    "p16-split": ([0, 9, 20], [3, 16], 16, 2, 6),
}


@pytest.mark.parametrize("ahead", (False, True), ids=("reference", "scores_ahead"))
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_interleaving_tried_reads_what_it_was_issued_for(name: str, ahead: bool) -> None:
    indptr, last, P, t0, t1 = LAYOUTS[name]
    tiles = walk(indptr, last, P, t0, t1)
    assert tiles
    for seed in range(40):
        run(tiles, ahead, seed)


def test_an_s_issued_ahead_across_a_segment_start_is_caught() -> None:
    """The schedule can fail: a look-ahead blind to segment starts issues the next S against the old Q, which the
    next segment's load then overwrites while it is read (or the S reads the wrong sequence's Q)."""
    tiles = walk([0, 2, 3, 7], [64, 1, 30], 64, 0, 7)
    with pytest.raises(AssertionError):
        for seed in range(40):
            run(tiles, True, seed, blind=True)
