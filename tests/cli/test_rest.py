"""The newcomer issue's last rough edges, through the command line at 80 columns with no TTY: `generate` and
`run` report each finished sample in a pipe as `eval` does; a damaged or foreign run header is one line
naming the file; a refused `--one-shot` or model leaves no run directory; the run directory's path is never
cut; the README's commands work as it writes them.

The model is a replay file (no network); the machine has no GPU, as in CI.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ptxbench.tasks.loader import bundled_suite

from ..conftest import EXAMPLES, FIXTURES
from .newcomer import COLUMNS, cli, one_line

PLAIN = (EXAMPLES / "transpose.cu").read_text()
BROKEN = (FIXTURES / "cpp_syntax_error.cu").read_text() + '\nextern "C" int transpose();\n'
ANSWERS = [f"```cuda\n{PLAIN}\n```", f"```cuda\n{BROKEN}\n```", "I would use TMA here, but I am not sure how."]
LINE = re.compile(r"\[(\d)/(\d)\] (transpose/sample_\d{3}): (.+?) \((\d+\.\d s|resumed)\) ?(.*)")


def _replay(folder: Path) -> Path:
    """Answers for samples 0-2 of transpose; a sample 3 has none (the replay provider's error)."""
    replay = folder / "answers.jsonl"
    replay.write_text("".join(json.dumps({"task": "transpose", "sample": i, "completion": text}) + "\n"
                              for i, text in enumerate(ANSWERS)))
    return replay


def _error_line(stderr: str) -> str:
    """stderr holds exactly one message, with no traceback."""
    assert "Traceback" not in stderr
    text = one_line(stderr)
    assert text.startswith("error: ") and text.count("error: ") == 1, stderr
    return text


def _progress(stdout: str) -> dict[str, tuple[str, str, str]]:
    """The per-sample lines, in the order printed, checked for form: {item: (verdict, time, reason)}."""
    lines = [line for line in stdout.splitlines() if line.startswith("[")]
    found = {}
    for number, line in enumerate(lines, 1):
        match = LINE.fullmatch(line)
        assert match is not None and int(match[1]) == number and int(match[2]) == len(lines), line
        assert not line.endswith("…"), line  # whole, however long
        found[match[3]] = (match[4], match[5], match[6])
    return found


# -- item 1: generate and run print a line per finished sample in a pipe, as eval does ------------------------


def test_generate_in_a_pipe_prints_a_line_per_sample_before_its_summary(tmp_path: Path) -> None:
    _replay(tmp_path)
    args = ("generate", "--model", "replay:answers.jsonl", "--tasks", "transpose", "--samples", "4", "--out", "gen")
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = _progress(done.stdout)
    # the provider's reason, whole: the line is longer than 80 columns, and was cut there
    provider = "no replayed answer for ReplayKey(task='transpose', sample=3, turn=0) in replay:answers.jsonl"
    assert {item: (verdict, reason) for item, (verdict, _, reason) in shown.items()} == {
        "transpose/sample_000": ("sampled", f"a candidate of {len(PLAIN.strip().splitlines())} lines"),
        "transpose/sample_001": ("sampled", f"a candidate of {len(BROKEN.strip().splitlines())} lines"),
        "transpose/sample_002": ("extraction: no_code_block", ""),
        "transpose/sample_003": ("extraction: provider_error", provider)}
    assert all(taken.endswith(" s") for _, taken, _ in shown.values())
    summary = done.stdout.split("[4/4] ", 1)[1].splitlines()[1:]  # after the last sample's line
    assert one_line("\n".join(summary[:-1])) == (
        "4 items sampled; provider errors: 1 (1× no replayed answer for ReplayKey(task='transpose', sample=3, turn=0) "
        "in replay:answers.jsonl); cost unknown")
    assert summary[-1] == "run directory: gen"

    again = cli(*args, cwd=tmp_path)  # a resumed run says so for each sample instead of a time
    assert again.returncode == 0, again.stderr
    assert {item: taken for item, (_, taken, _) in _progress(again.stdout).items()} == dict.fromkeys(shown, "resumed")


def test_run_in_a_pipe_prints_each_samples_verdict_as_eval_gives_it(tmp_path: Path) -> None:
    replay = _replay(tmp_path)
    done = cli("run", "--model", f"replay:{replay}", "--tasks", "transpose", "--samples", "3", "--out", "run",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    verdicts = {item: verdict for item, (verdict, _, _) in _progress(done.stdout).items()}
    assert verdicts == {"transpose/sample_000": "infra: NO_GPU", "transpose/sample_001": "COMPILE_ERROR",
                        "transpose/sample_002": "extraction: no_code_block"}
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["0/3 passed the static stage; provider errors: 0; cost unknown", "run directory: run"]

    evaluated = cli("eval", "run", "--out", "eval", cwd=tmp_path)  # the same answers through eval
    assert evaluated.returncode == 0, evaluated.stderr
    assert {item: verdict for item, (verdict, _, _) in _progress(evaluated.stdout).items()} == verdicts


def test_run_names_the_turns_a_sample_took(tmp_path: Path) -> None:
    replay = tmp_path / "answers.jsonl"  # a broken kernel, then the fix
    replay.write_text("".join(json.dumps({"task": "transpose", "sample": 0, "turn": turn, "completion": text}) + "\n"
                              for turn, text in enumerate(ANSWERS[1::-1])))
    done = cli("run", "--model", f"replay:{replay}", "--tasks", "transpose", "--turns", "2", "--out", "run",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [verdict for verdict, _, _ in _progress(done.stdout).values()] == ["infra: NO_GPU after 2 turns"]


# -- item 2: a damaged or foreign run.json is one line naming the file and what is wrong ---------------------

DAMAGED = {
    "not JSON": ("{'kind': 'eval'", "not a run header: not valid JSON (Expecting property name enclosed in double "
                                    "quotes: line 1 column 2 (char 1))"),
    "not UTF-8": (b"\xff\xfe\x00run", "not a run header: not UTF-8 text"),
    "a list": ("[1, 2]", "not a run header: a JSON list, not an object"),
    "foreign": (json.dumps({"name": "train", "steps": 100}), "not a run header (missing field 'kind'; missing field "
                                                            "'config')"),
    "bad kind": (json.dumps({"kind": "bench", "config": {}}), "not a run header (field 'kind': Input should be "
                                                              "'generate', 'run', 'eval' or 'repair')"),
    "newer": (json.dumps({"version": 3, "kind": "eval", "config": {}, "ptxbench": "9.0.0", "shards": 4}),
              "written by ptxbench 9.0.0 with run header version 3; this ptxbench ({version}) reads version 2; "
              "upgrade ptxbench to read it"),
}
LOADING = [["eval", "RUN"], ["eval", "RUN", "--regrade"], ["report", "RUN"], ["metrics", "RUN"],
           ["compare", "RUN", "RUN"], ["leaderboard", "RUN"]]


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_or_foreign_run_header_is_one_line_naming_the_file(tmp_path: Path, damage: str) -> None:
    from ptxbench import __version__

    content, problem = DAMAGED[damage]
    (tmp_path / "run").mkdir()
    header = tmp_path / "run" / "run.json"
    header.write_bytes(content if isinstance(content, bytes) else content.encode())
    # a damaged header is rebuilt from the items (issue #43, item 4): with none to rebuild it from, that is said too
    rebuilt = "" if damage == "newer" else "; no readable item to rebuild it from: choose a new --out directory"
    for command in LOADING:
        done = cli(*[str(tmp_path / "run") if arg == "RUN" else arg for arg in command])
        assert done.returncode == 2 and done.stdout == "", (command, done.stdout)
        assert _error_line(done.stderr) == f"error: {header}: {problem.format(version=__version__)}{rebuilt}", command


def test_a_damaged_run_header_in_the_out_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run.json").write_text("{")
    replay = _replay(tmp_path)
    for command in (["eval", str(EXAMPLES / "transpose.cu")],
                    ["generate", "--model", f"replay:{replay}", "--tasks", "transpose"]):
        done = cli(*command, "--out", "out", cwd=tmp_path)
        assert done.returncode == 2, command
        assert _error_line(done.stderr).startswith("error: out/run.json: not a run header: not valid JSON ("), command
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.json"], command


def test_a_damaged_item_result_is_one_line_naming_the_file(two_runs: Path, tmp_path: Path) -> None:
    import shutil

    evaluated = shutil.copytree(two_runs / "softmax", tmp_path / "eval")
    result = evaluated / "items" / "softmax" / "softmax" / "result.json"
    result.write_text("{")
    problem = f"error: {result}: not an evaluation (Invalid JSON: EOF while parsing an object at line 1 column 1)"
    # The readers name the damaged item and go on with the others (issue #43, item 4); Fixit refuses it.
    for command in (["report", str(evaluated)], ["metrics", str(evaluated)], ["compare", str(evaluated), str(evaluated)],
                    ["fixit", "mine", str(evaluated), "--out", str(tmp_path / "failures.jsonl")]):
        done = cli(*command)
        if command[0] == "fixit":
            assert done.returncode == 2 and _error_line(done.stderr) == problem, command
        elif command[0] == "compare":  # nothing is left to compare: refused, saying why
            assert done.returncode == 2 and _error_line(done.stderr).endswith(
                f"; left out as damaged: {problem.removeprefix('error: ')}"), command
        else:
            named = one_line(done.stdout + done.stderr)
            assert done.returncode == 0 and problem.removeprefix("error: ") in named, command
    # a resumed eval evaluates the damaged item again and keeps the damaged record aside
    resumed = cli("eval", str(EXAMPLES / "softmax.cu"), "--out", str(evaluated))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{problem.removeprefix('error: ')}: the item is evaluated again" in one_line(resumed.stderr)
    assert "1 re-evaluated: stored result damaged" in one_line(resumed.stdout)
    assert (evaluated / "superseded" / "softmax" / "softmax" / "1-stored-result-damaged" / "result.json").read_text() == "{"

    _replay(tmp_path)
    generated = cli("generate", "--model", "replay:answers.jsonl", "--tasks", "transpose", "--out", "gen", cwd=tmp_path)
    assert generated.returncode == 0, generated.stderr
    sample = tmp_path / "gen" / "items" / "transpose" / "sample_000" / "result.json"
    sample.write_bytes(b"\xff")
    problem = "error: gen/items/transpose/sample_000/result.json: not the result of a generated item (not UTF-8 text)"
    for command in (["report", "gen"], ["metrics", "gen"]):
        done = cli(*command, cwd=tmp_path)
        assert done.returncode == 0 and problem.removeprefix("error: ") in one_line(done.stdout + done.stderr), command
    done = cli("eval", "gen", "--out", "evaluated", cwd=tmp_path)
    assert done.returncode == 2 and _error_line(done.stderr) == problem
    again = cli("generate", "--model", "replay:answers.jsonl", "--tasks", "transpose", "--out", "gen", cwd=tmp_path)
    assert _error_line(again.stderr) == f"{problem}; remove it to sample the item again"


# -- item 3: what a real run refuses, it refuses before creating its run directory --------------------------


@pytest.mark.parametrize("command", ["generate", "run"])
@pytest.mark.parametrize(("option", "message"), [
    (["--one-shot", "softmax:missing.cu"],
     "error: --one-shot softmax:missing.cu: cannot read candidate missing.cu: No such file or directory"),
    (["--one-shot", "softmax:answers.jsonl"],
     "error: --one-shot softmax:answers.jsonl: answers.jsonl: a candidate is one CUDA C++ file (.cu, .cuh, .cpp, .cc)"),
    (["--one-shot", "nosuch:missing.cu"], "error: --one-shot nosuch:missing.cu: unknown task 'nosuch'; bundled tasks: "
     + ", ".join(sorted(t.id for t in bundled_suite()))),
    (["--one-shot", f"transpose:{EXAMPLES / 'transpose.cu'}"],
     "error: a one-shot example must come from another task than 'transpose'"),
    (["--model", "replay:missing.jsonl"], "error: cannot read replay file missing.jsonl: No such file or directory"),
    (["--model", "replay:binary.jsonl"], "error: replay file binary.jsonl: not a text file (one JSON object a line)"),
    (["--model", "bogus:model"], "error: unknown provider 'bogus' in 'bogus:model'; known: openai, vllm, sglang, "
                                 "ollama, anthropic, replay, hf"),
])
def test_a_refused_run_leaves_no_run_directory(tmp_path: Path, command: str, option: list[str], message: str) -> None:
    replay = _replay(tmp_path)
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe")
    done = cli(command, "--model", f"replay:{replay}", "--tasks", "transpose", "--out", "out", *option, cwd=tmp_path)
    assert done.returncode == 2
    assert _error_line(done.stderr) == message
    assert not (tmp_path / "out").exists(), "nothing was created"


# -- item 4: the run directory's path is printed whole, on its own line -------------------------------------


def test_a_long_run_directory_stays_whole_on_its_line(tmp_path: Path) -> None:
    out = tmp_path / ("a-run-directory-whose-path-is-longer-than-eighty-columns-" * 2)
    assert len(f"run directory: {out}") > COLUMNS
    replay = _replay(tmp_path)
    for command in (["eval", str(EXAMPLES / "transpose.cu"), "--out", str(out / "eval")],
                    ["generate", "--model", f"replay:{replay}", "--tasks", "transpose", "--out", str(out / "gen")],
                    ["run", "--model", f"replay:{replay}", "--tasks", "transpose", "--out", str(out / "run")]):
        done = cli(*command)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"run directory: {command[-1]}", command


# -- item 5: the README's commands, walked as a stranger on a CPU machine -------------------------------------


def test_tasks_list_fits_80_columns_with_every_word_whole() -> None:
    done = cli("tasks", "list")
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout, done.stdout  # no header or title cut short
    assert max(len(line) for line in done.stdout.splitlines()) <= COLUMNS
    assert "held-out)" in done.stdout


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two eval runs of one example each, on different tasks: nothing in common to pair."""
    root = tmp_path_factory.mktemp("two")
    for task in ("softmax", "transpose"):
        done = cli("eval", str(EXAMPLES / f"{task}.cu"), "--out", task, cwd=root)
        assert done.returncode == 0, done.stderr
    return root


@pytest.mark.parametrize(("command", "message"), [
    (["metrics", "softmax", "-k", "2"], "error: pass@2 needs at least 2 attempts per task; too few in: "
                                        "sm_90a/softmax (1): use at most -k 1, or sample more"),
    (["metrics", "softmax", "--by", "modle"], "error: cannot group by modle: not a field of an attempt (one of: "
     "version, run, model, provider, condition, arch, task, family, sample, turn, last_turn, compiled, "
     "features_in_ptx, features_in_sass, requirements, correct, visible_correct, heldout_correct, "
     "heldout_variant_correct, features_executed, speedup, "
     "roofline_pct, status, error_class, verified_on_gpu, evidence)"),
    (["compare", "softmax", "transpose", "--metric", "speed"], "error: unknown metric 'speed': one of compile, "
     "features_in_ptx, features_in_sass, correct, features_executed, fast_<p> or sol_<p>"),
    (["leaderboard", "softmax", "--metric", "fast_x"], "error: unknown metric 'fast_x': fast_p needs a number, "
                                                       "e.g. fast_1.0"),
    (["compare", "softmax", "transpose", "--metric", "compile"], "error: softmax and transpose have no (arch, task) "
                                                                "in common: a comparison pairs the runs task by task"),
    (["leaderboard", "softmax", "transpose", "--metric", "compile"], "error: run 'softmax' has no attempts on the "
                                                                     "tasks common to all runs"),
])
def test_a_metric_option_that_cannot_be_used_is_one_line(two_runs: Path, command: list[str], message: str) -> None:
    done = cli(*command, cwd=two_runs)
    assert done.returncode == 2 and done.stdout == ""
    assert _error_line(done.stderr) == message


def test_fixit_given_another_steps_file_names_the_file_line_and_fields(tmp_path: Path) -> None:
    (tmp_path / "failures.jsonl").write_text('{"task": "softmax"}\n')  # mined failures, not repair pairs
    explain = ["fixit", "explain", "failures.jsonl", "--teacher", "replay:x"]
    for command in (["fixit", "build", "failures.jsonl"], explain):
        done = cli(*command, cwd=tmp_path)
        assert done.returncode == 2
        assert _error_line(done.stderr) == ("error: failures.jsonl:1: not a repair pair record (missing field "
                                            "'failure'; missing field 'fixed_source'; missing field 'verified'; "
                                            "missing field 'origin')")
    missing = cli("fixit", "build", "pairs.jsonl", cwd=tmp_path)
    assert _error_line(missing.stderr) == "error: cannot read pairs.jsonl: No such file or directory"


def test_eval_without_a_gpu_names_each_requirements_stage_in_checks_words(two_runs: Path) -> None:
    done = cli("eval", str(EXAMPLES / "softmax.cu"), "--out", "softmax", cwd=two_runs, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "static only: tma.load | bulk.copy absent; mbarrier absent" in done.stdout


def test_check_says_a_cached_builds_time_is_from_when_it_was_built(tmp_path: Path) -> None:
    env = {"PTXBENCH_CACHE": str(tmp_path / "cache")}
    (tmp_path / "softmax.cu").write_text((EXAMPLES / "softmax.cu").read_text())  # a relative name: the title
    first = cli("check", "softmax.cu", env=env, cwd=tmp_path)                   # line holds it whole
    again = cli("check", "softmax.cu", env=env, cwd=tmp_path)
    assert re.fullmatch(r"  built in \d+\.\d s; checked in \d+\.\d s", first.stdout.splitlines()[1]), first.stdout
    assert re.fullmatch(r"  build cached \(it took \d+\.\d s\); checked in \d+\.\d s", again.stdout.splitlines()[1])


def _readme_commands() -> list[tuple[list[list[str]], list[str]]]:
    """Each row of the README's Commands table: the command lines it names (``tasks list|show`` names two)
    and the options it shows."""
    from ..conftest import REPO

    rows = []
    for line in (REPO / "README.md").read_text().splitlines():
        match = re.match(r"\| `ptxbench ([^`]+)`", line)
        if match is None:
            continue
        usage = match[1].replace("\\|", "|")
        words = usage.split()
        names = [[words[0]]] if words[0] not in ("tasks", "cache", "fixit") else \
            [[words[0], sub] for sub in re.findall(r"(?:^|\|)([a-z]+)", " ".join(words[1:]).split(" [")[0])]
        for group, sub in re.findall(r"\b(cache) [a-z|\[\]\- A-Z]*?\|([a-z]+)$", usage):
            names.append([group, sub])
        rows.append((names, re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", usage)))
    return rows


@pytest.mark.slow
def test_every_option_in_the_readme_commands_table_exists() -> None:
    rows = _readme_commands()
    assert len(rows) >= 15 and any(["cache", "clear"] in names for names, _ in rows)
    for names, options in rows:
        shown = " ".join(cli(*name, "--help", env={"COLUMNS": "200"}).stdout for name in names)
        for option in options:
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", shown), (names, option)
