"""LoRA training on a tiny random Llama built offline: the run writes what the local provider loads,
the config round-trips, and bad inputs fail with one clear error before anything heavy is imported."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from ptxbench.fixit.train import (
    CONFIG_FILE,
    RESULT_FILE,
    TrainConfig,
    TrainError,
    TrainResult,
    load_train_config,
    train,
)
from ptxbench.llm.client import complete_all_sync
from ptxbench.llm.types import CompletionRequest, SamplingParams
from ptxbench.prompts.conversation import Message

from ..tiny_model import save_tiny_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("peft")
pytest.importorskip("trl")
pytest.importorskip("datasets")

WORDS = ("fix the kernel it failed because the wgmma fence is missing add a fence before the mma "
         "here is the fixed file system user assistant : ```cuda ```").split()


def write_records(path: Path, count: int = 8) -> Path:
    lines = []
    for i in range(count):
        record = {
            "messages": [
                {"role": "system", "content": "fix the kernel"},
                {"role": "user", "content": "here is the kernel it failed" + " because" * (i % 3)},
                {"role": "assistant", "content": "the wgmma fence is missing add a fence before the mma ```cuda ```"},
            ],
            "task": f"t{i}",  # metadata the trainer ignores
        }
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


def small_config(tmp_path: Path, base: Path, **changes: object) -> TrainConfig:
    settings: dict = dict(
        base_model=str(base), dataset=write_records(tmp_path / "train.jsonl"), output_dir=tmp_path / "out",
        lora_r=4, lora_alpha=8, lora_dropout=0.0, learning_rate=1e-2, max_steps=4, batch_size=2,
        gradient_accumulation_steps=1, max_seq_length=64, device="cpu", seed=1,
    )
    settings.update(changes)
    return TrainConfig.model_validate(settings)


def test_trains_an_adapter_that_the_local_provider_loads(tmp_path: Path) -> None:
    from ptxbench.llm.providers.hf_local import HFLocalProvider

    base = save_tiny_model(tmp_path / "tiny", WORDS)
    config = small_config(tmp_path, base)
    result = train(config)
    out = config.output_dir

    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer_config.json", CONFIG_FILE, RESULT_FILE):
        assert (out / name).is_file(), name
    assert result.steps == 4 and result.records == 8 and result.records_too_long == 0
    assert math.isfinite(result.final_loss) and math.isfinite(result.mean_loss) and result.final_loss > 0
    assert 0 < result.trainable_parameters < result.total_parameters
    assert result.chat_template and result.precision == "fp32" and result.device == "cpu"
    assert result.versions["trl"] and result.versions["peft"]
    assert load_train_config(out / CONFIG_FILE) == config  # absolute paths: resolved == as given
    assert TrainResult.model_validate_json((out / RESULT_FILE).read_text()) == result
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]

    provider = HFLocalProvider(str(base), adapter=str(out), device="cpu")
    request = CompletionRequest(
        model=f"hf:{base}",
        messages=[Message(role="system", content="fix the kernel"), Message(role="user", content="here is the kernel")],
        params=SamplingParams(temperature=0.0, max_tokens=6),
    )
    [done] = complete_all_sync([request], provider, concurrency=1, cache=None)
    assert done.error is None, done.error
    assert 1 <= done.usage.output_tokens <= 6 and done.text.strip()

    with pytest.raises(TrainError, match="already holds a finished run"):
        train(config)


def test_plain_tokenizer_trains_on_the_providers_text_format(tmp_path: Path) -> None:
    """No chat template: records become the role-prefixed text the provider sends; too-long ones are
    left out and counted, not truncated."""
    base = save_tiny_model(tmp_path / "tiny", WORDS, chat_template=False)
    config = small_config(tmp_path, base, max_steps=1, max_seq_length=27, target_modules="all-linear")
    result = train(config)
    assert result.steps == 1 and not result.chat_template and math.isfinite(result.final_loss)
    assert result.records + result.records_too_long == 8 and result.records_too_long > 0


def test_loss_is_on_the_last_message_only(tmp_path: Path) -> None:
    """What TRL will train on: the final answer and its end-of-turn token, not the prompt and not an
    earlier assistant turn."""
    from ptxbench.fixit.train import build_trainer

    base = save_tiny_model(tmp_path / "tiny", WORDS)
    record = {"messages": [{"role": "user", "content": "fix the kernel"}, {"role": "assistant", "content": "the mma"},
                           {"role": "user", "content": "it failed"}, {"role": "assistant", "content": "add a fence"}]}
    config = small_config(tmp_path, base)
    config.dataset.write_text(json.dumps(record) + "\n")
    setup = build_trainer(config.resolved())
    batch = setup.trainer.data_collator([setup.trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    trained = [token for token, label in zip(ids, labels) if label != -100]
    assert setup.trainer.processing_class.convert_ids_to_tokens(trained) == ["add", "a", "fence", "</s>"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.toml", 'base_model = "x"\ndataset = [unclosed\n', "not valid TOML"),
        ("bad.json", '{"base_model": "x",', "not valid JSON"),
        ("list.json", "[1, 2]", "a table of settings"),
        ("fields.toml", 'base_model = "x"\ndataset = "d.jsonl"\noutput_dir = "o"\nlora_r = 0\nlearning_rat = 1.0\n',
         "lora_r: Input should be greater than or equal to 1; learning_rat: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_config_gives_one_clear_error(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TrainError, match=message) as caught:
        load_train_config(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value).strip()
    assert caught.value.__cause__ is None and (caught.value.__suppress_context__ or caught.value.__context__ is None)


def test_a_toml_config_loads_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    path.write_text('base_model = "org/model"\ndataset = "train.jsonl"\noutput_dir = "adapter"\nmax_steps = 10\n')
    config = load_train_config(path)
    assert config.max_steps == 10 and config.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert TrainConfig.model_validate_json(config.model_dump_json()) == config


def test_a_bad_record_is_named_by_line(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    messages = [{"role": "user", "content": "fix"}, {"role": "user", "content": "?"}]
    data.write_text(json.dumps({"messages": messages}) + "\n")
    config = TrainConfig(base_model="unused", dataset=data, output_dir=tmp_path / "out")
    with pytest.raises(TrainError, match=r"train.jsonl:1: needs .* the assistant's answer last"):
        train(config)


def test_a_missing_library_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl now raises ImportError
    data = write_records(tmp_path / "train.jsonl")
    config = TrainConfig(base_model="unused", dataset=data, output_dir=tmp_path / "o")
    with pytest.raises(TrainError, match=r"needs trl .*pip install 'ptxbench\[train\]'"):
        train(config)
