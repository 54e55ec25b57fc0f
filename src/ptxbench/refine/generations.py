"""Completions made elsewhere (a generations ``.jsonl``), as candidates for ``ptxbench eval``.

Each answer goes through the same extraction as a turn of the loop, so a sample whose answer held no
code is a candidate too, with its extraction failure, and drops out of no count.
"""

from __future__ import annotations

import json
from pathlib import Path

from ptxbench.errors import CandidateError
from ptxbench.evaluate.fleet.run import Candidate
from ptxbench.llm.extract import extract_candidate
from ptxbench.records.evaluation import Generation
from ptxbench.records.trajectory import item_name
from ptxbench.tasks.loader import get_task


def candidates_from_generations(path: Path) -> list[Candidate]:
    """Completions made elsewhere, one JSON object per line with ``task``, ``completion`` and optionally
    ``sample``, ``turn`` (the replay provider's format), ``model`` and ``context``. Each (task, sample) is one
    candidate: its last turn with code, else its last turn's extraction failure."""
    samples: dict[tuple[str, int], list[tuple[int, Candidate]]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            task = get_task(record["task"])
            text = record["completion"]
            sample, turn = int(record.get("sample", number - 1)), int(record.get("turn", 0))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CandidateError(f"{path}:{number}: not a generation record ({exc})") from None
        model = record.get("model")
        labels = Generation(run=path.name, model=model, provider=model.partition(":")[0] if model else None,
                            condition=record.get("context"), sample=sample, turn=turn)
        extraction = extract_candidate(text, task.entry_point)
        samples.setdefault((task.id, sample), []).append((turn, Candidate(
            task=task, item=item_name(sample), source=extraction.source, origin=f"{path}:{number}",
            extraction=None if extraction.ok else extraction.status, notes=extraction.notes, generation=labels)))
    found = []
    for turns in samples.values():
        turns.sort(key=lambda pair: pair[0])
        found.append(next((c for _, c in reversed(turns) if c.extraction is None), turns[-1][1]))
    return found
