"""The attention_bwd variants that issue the score GEMMs one step ahead (benchmarks/variants/
attention_bwd.{dq,dkdv}_scores_ahead.cu) keep the reference's tiling and arithmetic (tests/test_reference_attention_bwd_model.py covers
those) but change what is in flight when: the risk is a register read before its wgmma group is done, an A
operand repacked under a running wgmma, a stage released while a wgmma still reads it, or a ring that
deadlocks now that a consumer holds two stages. No GPU here, so this module runs each variant's own sequence of
issues, waits, reads and releases (read from its source, not restated) against a model of wgmma commit groups,
which complete in commit order, and its consumers against the mbarrier rings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_reference_attention_bwd_model import KEY, QUERY, Ring, fill, key_tiles, run_agents
from tests.test_reference_attention_model import parity_wait

VARIANTS = Path(__file__).resolve().parents[1] / "benchmarks" / "variants"
DQ = VARIANTS / "attention_bwd.dq_scores_ahead.cu"
DKDV = VARIANTS / "attention_bwd.dkdv_scores_ahead.cu"

# The calls the schedules are made of, in source order (lambda bodies are not matched: their effects are below).
TOKEN = re.compile(
    r"(?P<scores>\bscores\(at\))|issue_scores<[^>]*>\((?P<score_acc>\w+)"
    r"|issue_accumulate<[^>]*>\((?P<acc>\w+), (?P<a>\w+), s\.\w+\[(?P<acc_stage>\w+)\.stage\]"
    r"|wgmma_wait<(?P<wait>\d)>|(?P<prob>\bprobabilities\()|(?P<grad>\bgradients\()"
    r"|consumer_release\((?P<rel1>\w+)\.stage\)|\brelease\((?P<rel2>\w+)\)|(?P<acquire>kv_ring\.consumer_wait\(at\))"
    r"|(?P<prev>prev = at;)|(?P<advance>at\.advance\()")


KINDS = ("scores", "score_acc", "acc", "wait", "prob", "grad", "rel1", "rel2", "acquire", "prev", "advance")


def kind_of(token: re.Match) -> str:  # type: ignore[type-arg]
    """Which call a token is (its first named group that matched: `lastgroup` would name an inner one)."""
    return next(k for k in KINDS if token[k] is not None)


def schedule(text: str) -> tuple[list[re.Match], list[re.Match], list[re.Match]]:  # type: ignore[type-arg]
    """(prologue, loop body, tail) tokens of a pipelined loop `for (int x = 1; ...) {` ... its closing brace."""
    loop = re.search(r"^( *)for \(int \w = 1; .*\{\n", text, re.M)
    assert loop, "the variant's pipelined loop changed form: update this model with it"
    end = text.index(f"\n{loop[1]}}}\n", loop.end())
    return (list(TOKEN.finditer(text[:loop.start()])), list(TOKEN.finditer(text[loop.end():end])),
            list(TOKEN.finditer(text[end:])))


@dataclass
class Group:
    writes: set[str]
    reads: set[str]
    stage: int  # the query/key step whose shared-memory stage it reads


@dataclass
class Warpgroup:
    """One consumer warpgroup: commit groups in flight, stages held, and the step each value belongs to."""

    pending: list[Group] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    acquired: int = 0
    at: int = 0
    prev: int = -1
    step_of: dict[str, int] = field(default_factory=dict)
    accumulated: dict[str, list[int]] = field(default_factory=dict)
    max_held: int = 0

    def cpu(self, reads: set[str], writes: set[str]) -> None:
        for group in self.pending:
            assert not (group.writes & (reads | writes)), f"{group.writes & (reads | writes)} used in flight"
            assert not (group.reads & writes), f"{group.reads & writes} rewritten while a wgmma reads it"

    def issue(self, writes: set[str], reads: set[str], stage: int) -> None:
        assert stage in self.held, f"a wgmma reads step {stage}'s stage, not held (held {self.held})"
        self.cpu(reads, set())  # an A operand must be complete; chaining an accumulator is allowed
        self.pending.append(Group(writes, reads, stage))

    def wait(self, n: int) -> None:
        del self.pending[:max(0, len(self.pending) - n)]

    def acquire(self) -> None:
        assert self.at == self.acquired, "stages are acquired in order, each once"
        self.held.append(self.at)
        self.acquired += 1
        self.max_held = max(self.max_held, len(self.held))

    def release(self, step: int) -> None:
        assert self.held and self.held[0] == step, f"release of step {step} out of order (held {self.held})"
        assert all(g.stage != step for g in self.pending), f"step {step}'s stage released under a running wgmma"
        self.held.pop(0)


def run_dq(tiles: int, text: str | None = None) -> Warpgroup:
    """The dQ variant's consumer over `tiles` key tiles (`text`: the variant's source, as it is by default)."""
    text = DQ.read_text() if text is None else text
    wg = Warpgroup()
    prologue, body, tail = schedule(text[text.index("const auto probabilities"):])
    for token in prologue + body * (tiles - 1) + tail:
        kind = kind_of(token)
        if kind == "acquire":
            wg.acquire()
        elif kind == "score_acc":
            wg.issue({token["score_acc"]}, set(), wg.at)
            wg.step_of[token["score_acc"]] = wg.at
        elif kind == "acc":
            step = {"prev": wg.prev, "at": wg.at}[token["acc_stage"]]
            assert wg.step_of[token["a"]] == step, "dQ += dS K pairs one step's dS with another's K"
            wg.issue({token["acc"]}, {token["a"]}, step)
            wg.accumulated.setdefault(token["acc"], []).append(step)
        elif kind == "wait":
            wg.wait(int(token["wait"]))
        elif kind == "prob":  # S -> P in place
            wg.cpu({"sacc"}, {"sacc"})
        elif kind == "grad":  # dS from P and dP, packed to dsa
            assert wg.step_of["sacc"] == wg.step_of["dpacc"] == wg.at
            wg.cpu({"sacc", "dpacc"}, {"dpacc", "dsa"})
            wg.step_of["dsa"] = wg.at
        elif kind in ("rel1", "rel2"):
            wg.release({"prev": wg.prev, "at": wg.at}[token[kind]])
        elif kind == "prev":
            wg.prev = wg.at
        elif kind == "advance":
            wg.at += 1
    wg.cpu({"dq"}, set())  # the epilogue reads dQ
    return wg


def run_dkdv(tiles: int) -> Warpgroup:
    """The dK/dV variant's consumer (its D = 64 loop) over `tiles` query tiles."""
    text = DKDV.read_text()
    wg = Warpgroup()
    prologue, body, tail = schedule(text[text.index("ptx::RingState at;  // step 0"):text.index("// Epilogue")])
    for token in prologue + body * (tiles - 1) + tail:
        kind = kind_of(token)
        if kind == "scores":  # wait for the stage, then Sᵀ and dPᵀ from it
            wg.acquire()
            for acc in ("sacc", "dpacc"):
                wg.issue({acc}, set(), wg.at)
                wg.step_of[acc] = wg.at
        elif kind == "prob":  # Sᵀ -> Pᵀ packed to pa, then dV += Pᵀ dO from the same stage
            assert wg.step_of["sacc"] == wg.at
            wg.cpu({"sacc"}, {"sacc", "pa"})
            wg.issue({"dv"}, {"pa"}, wg.at)
            wg.accumulated.setdefault("dv", []).append(wg.at)
        elif kind == "grad":
            assert wg.step_of["dpacc"] == wg.at
            wg.cpu({"sacc", "dpacc"}, {"dpacc", "dsa"})
            wg.step_of["dsa"] = wg.at
        elif kind == "acc":
            step = {"prev": wg.prev, "at": wg.at}[token["acc_stage"]]
            assert wg.step_of[token["a"]] == step, "dK += dSᵀ Q pairs one step's dSᵀ with another's Q"
            wg.issue({token["acc"]}, {token["a"]}, step)
            wg.accumulated.setdefault(token["acc"], []).append(step)
        elif kind == "wait":
            wg.wait(int(token["wait"]))
        elif kind in ("rel1", "rel2"):
            wg.release({"prev": wg.prev, "at": wg.at}[token[kind]])
        elif kind == "prev":
            wg.prev = wg.at
        elif kind == "advance":
            wg.at += 1
    wg.cpu({"dv", "dk"}, set())  # the epilogue reads dK and dV
    return wg


@pytest.mark.parametrize("tiles", [1, 2, 3, 7])
def test_the_dq_variant_reads_nothing_in_flight_and_accumulates_every_step_once(tiles: int) -> None:
    wg = run_dq(tiles)
    assert wg.accumulated["dq"] == list(range(tiles))
    assert wg.held == [] and wg.acquired == tiles and wg.max_held == min(2, tiles)


@pytest.mark.parametrize("tiles", [1, 2, 3, 7])
def test_the_dkdv_variant_reads_nothing_in_flight_and_accumulates_every_step_once(tiles: int) -> None:
    wg = run_dkdv(tiles)
    assert wg.accumulated["dv"] == wg.accumulated["dk"] == list(range(tiles))
    assert wg.held == [] and wg.acquired == tiles and wg.max_held == min(2, tiles)


def test_the_schedule_model_catches_a_wait_that_is_one_too_loose() -> None:
    """The checks above can fail: with the dQ loop's first wait relaxed from 2 to 3 pending groups, S is read
    while its wgmma may still run."""
    text = DQ.read_text()
    loose = text.replace("ptx::wgmma_wait<2>();", "ptx::wgmma_wait<3>();", 1)
    assert loose != text
    with pytest.raises(AssertionError, match="used in flight"):
        run_dq(3, loose)


# ---- the rings: a consumer that holds step j-1's stage until step j's is full ----------------------


def drain_ahead(rings: list[Ring], steps: int, then: int = 0):  # type: ignore[no-untyped-def]
    """A variant's consumer: waits for stage j while still holding j-1, then releases j-1; the last is
    released at the end. `then` more steps follow as the reference's plain wait-and-release (dQ's skip)."""
    for j in range(steps):
        stage = j % rings[0].stages
        for ring in rings:
            while not parity_wait(ring.full[stage], j // ring.stages):
                yield
        if j > 0:
            for ring in rings:
                ring.release((j - 1) % ring.stages)
    if steps:
        for ring in rings:
            ring.release((steps - 1) % ring.stages)
    for j in range(steps, steps + then):
        stage = j % rings[0].stages
        for ring in rings:
            while not parity_wait(ring.full[stage], j // ring.stages):
                yield
        for ring in rings:
            ring.release(stage)


ORDERS = ([0, 1, 2, 3], [3, 2, 1, 0], [1, 2, 3, 0], [0, 0, 0, 1, 2, 3], [2, 2, 2, 3, 0, 1], [3, 3, 3, 1, 0, 2])


@pytest.mark.parametrize("S", [2, 64, 200, 1000])
@pytest.mark.parametrize("causal", [0, 1])
def test_the_dkdv_variant_rings_never_deadlock_at_head_dim_64(S: int, causal: int) -> None:
    _, bn, _ = key_tiles(64)
    bq, stages = KEY["bq"], KEY["stages"][64]
    for k_tile in range(-(-S // bn)):
        q_tiles = -(-S // bq) - ((k_tile * bn) // bq if causal else 0)
        for order in ORDERS:
            qdo, row = Ring(stages, 2), Ring(stages, 2)
            done = run_agents([fill(qdo, q_tiles), fill(row, q_tiles), drain_ahead([qdo, row], q_tiles),
                               drain_ahead([qdo, row], q_tiles)], order)
            assert all(done), f"dK/dV deadlock: key tile {k_tile}, order {order}, done {done}"
            assert qdo.empty == qdo.full == row.full == row.empty and sum(qdo.full) == q_tiles


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("S", [2, 64, 200, 1000])
@pytest.mark.parametrize("causal", [0, 1])
def test_the_dq_variant_ring_never_deadlocks(D: int, S: int, causal: int) -> None:
    """Each warpgroup walks its own tiles ahead, then waits for and releases the rest as the reference does
    (a warpgroup wholly past S only the latter)."""
    bm, bnq, stages = QUERY["bm"], QUERY["bn"][D], QUERY["stages"][D]
    for q_tile in range(-(-S // bm)):
        q0 = q_tile * bm
        kv_tiles = -(-(min(S, q0 + bm) if causal else S) // bnq)
        own = []
        for half in range(2):
            q0w = q0 + 64 * half
            own.append(0 if q0w >= S else (min(kv_tiles, -(-min(S, q0w + 64) // bnq)) if causal else kv_tiles))
        for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 0, 0, 1, 2], [2, 2, 2, 0, 1]):
            kv = Ring(stages, 2)
            done = run_agents([fill(kv, kv_tiles)] + [drain_ahead([kv], n, kv_tiles - n) for n in own], order)
            assert all(done), f"dQ deadlock: query tile {q_tile}, order {order}, done {done}"
            assert kv.empty == kv.full and sum(kv.full) == kv_tiles


def test_a_ring_of_one_stage_would_deadlock_the_ahead_consumer() -> None:
    """The ring model can fail: holding two stages needs at least two."""
    kv = Ring(1, 1)
    done = run_agents([fill(kv, 3), drain_ahead([kv], 3)], [0, 1])
    assert not all(done)
