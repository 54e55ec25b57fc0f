"""Fixit, the training step: LoRA supervised fine-tuning on repair chat records, with the loss on the
answer only.

Each record's last message is the assistant's answer (explanation + fixed kernel); everything before it
is context the model sees at evaluation time. We hand TRL the records as *prompt-completion* pairs
(prompt = all messages but the last, completion = the last), and TRL's ``completion_only_loss`` masks
the prompt tokens. That is exactly "loss on the last message": unlike ``assistant_only_loss`` it needs
no ``{% generation %}`` markers in the chat template, and it would not train earlier assistant turns of
a multi-turn record. A tokenizer without a chat template gets the same role-prefixed text that
``HFLocalProvider`` sends such models, so training and evaluation see one format.

The output directory is what ``HFLocalProvider(base, adapter=output_dir)`` loads: the adapter, the
tokenizer, the resolved ``train_config.json`` and a ``train_result.json``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import platform
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NamedTuple

from pydantic import ConfigDict, Field, ValidationError, field_validator

from ptxbench import __version__
from ptxbench._compat import tomllib
from ptxbench._io import write_atomic
from ptxbench.errors import PtxbenchError
from ptxbench.llm.providers.hf_local import plain_prompt
from ptxbench.prompts.conversation import Message
from ptxbench.records import Record

TRAIN_SCHEMA_VERSION = 1
CONFIG_FILE = "train_config.json"
RESULT_FILE = "train_result.json"
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
_LIBRARIES = ("torch", "transformers", "peft", "trl", "datasets", "accelerate")


class TrainError(PtxbenchError):
    """Training cannot start or finish: a bad config or data file, a missing library, a used output dir."""


class TrainConfig(Record):
    """Everything that changes the trained adapter. Written back, resolved, as ``train_config.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = TRAIN_SCHEMA_VERSION
    base_model: str = Field(min_length=1, description="Local directory or Hugging Face Hub id of the base model.")
    dataset: Path = Field(description="JSONL of chat records; each line's last message is the assistant's answer.")
    output_dir: Path = Field(description="Where the adapter, tokenizer, config and result are written.")
    lora_r: int = Field(default=16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(default=32, ge=1, description="LoRA scale numerator (the update is scaled by alpha/r).")
    lora_dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] | Literal["all-linear"] = Field(
        default=list(ATTENTION_PROJECTIONS),
        description="Module names to adapt, or 'all-linear' (every linear layer but the output head).",
    )
    learning_rate: float = Field(default=2e-4, gt=0)
    epochs: float = Field(default=1.0, gt=0, description="Passes over the data; ignored when max_steps is set.")
    max_steps: int | None = Field(default=None, ge=1, description="Optimizer steps; overrides epochs.")
    batch_size: int = Field(default=1, ge=1, description="Records per device per forward pass.")
    gradient_accumulation_steps: int = Field(default=8, ge=1)
    warmup_ratio: float = Field(default=0.0, ge=0, lt=1, description="Share of steps with a linear warm-up.")
    max_seq_length: int = Field(
        default=8192, ge=16,
        description="Tokens of prompt + answer; longer records are left out (and counted), never truncated.",
    )
    gradient_checkpointing: bool = Field(default=True, description="Trade compute for memory on long kernels.")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        default="auto", description="'auto' is bf16 on a GPU that supports it, else fp32."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="'auto' is cuda when available.")
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)
    trust_remote_code: bool = False

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list) and not value:
            raise ValueError("name at least one module, or 'all-linear'")
        return value

    def resolved(self) -> TrainConfig:
        """Paths made absolute (a local base model too), so the written config names what was used
        wherever it is read from."""
        local = Path(self.base_model).expanduser()
        base = str(local.resolve()) if local.exists() else self.base_model
        return self.model_copy(
            update={"base_model": base, "dataset": self.dataset.expanduser().resolve(),
                    "output_dir": self.output_dir.expanduser().resolve()}
        )


class TrainResult(Record):
    """What a training run did, for the report and for comparing runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = TRAIN_SCHEMA_VERSION
    created: str = Field(description="UTC time the run finished, ISO 8601.")
    output_dir: Path
    steps: int = Field(description="Optimizer steps taken.")
    epochs: float = Field(description="Passes over the data actually made (fractional when max_steps stops early).")
    records: int = Field(description="Records trained on.")
    records_too_long: int = Field(description="Records left out because prompt + answer exceed max_seq_length.")
    final_loss: float = Field(description="Training loss of the last logged step (answer tokens only).")
    mean_loss: float = Field(description="Training loss averaged over all steps.")
    runtime_s: float
    trainable_parameters: int
    total_parameters: int
    device: str
    precision: Literal["bf16", "fp32"]
    chat_template: bool = Field(description="False: the tokenizer had none, records were rendered as plain text.")
    versions: dict[str, str | None] = Field(description="python, ptxbench and the training libraries.")


class _Libraries(NamedTuple):
    torch: ModuleType
    transformers: ModuleType
    peft: ModuleType
    trl: ModuleType
    datasets: ModuleType


class TrainerSetup(NamedTuple):
    """A trainer ready to run, and what went into it (for the result)."""

    trainer: Any
    records: int
    records_too_long: int
    device: str
    precision: Literal["bf16", "fp32"]
    chat_template: bool


class _Prepared(NamedTuple):
    rows: list[dict[str, Any]]
    too_long: int


def load_train_config(path: Path | str) -> TrainConfig:
    """A config from TOML (``.toml``) or JSON (anything else); every problem reported in one error."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TrainError(f"cannot read train config {path}: {e.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise TrainError(f"{path}: not valid {kind}: {e}") from None
    if not isinstance(data, dict):
        raise TrainError(f"{path}: a train config is a table of settings, got {type(data).__name__}")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as e:
        raise TrainError(f"{path}: invalid train config: {_problems(e)}") from None


def read_records(path: Path) -> list[list[Message]]:
    """The messages of each JSONL line, checked: at least one message of context, and the last one is
    the assistant's answer (the only part trained on). Other keys of a record are metadata, ignored."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise TrainError(f"cannot read dataset {path}: {e.strerror}") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
            messages = [Message.model_validate(m) for m in record["messages"]]
        except json.JSONDecodeError as e:
            raise TrainError(f"{where}: not valid JSON: {e}") from None
        except (KeyError, TypeError):
            raise TrainError(f"{where}: a record is an object with a 'messages' list") from None
        except ValidationError as e:
            raise TrainError(f"{where}: bad message: {_problems(e)}") from None
        if len(messages) < 2 or messages[-1].role != "assistant":
            raise TrainError(f"{where}: needs at least one message of context and the assistant's answer last")
        records.append(messages)
    if not records:
        raise TrainError(f"{path}: no records")
    return records


def train(config: TrainConfig, *, overwrite: bool = False) -> TrainResult:
    """Fine-tune a LoRA adapter on ``config.dataset`` and write it to ``config.output_dir``.

    A directory that already holds a ``train_result.json`` is a finished run and is refused unless
    ``overwrite``, so a rerun never silently replaces an adapter that was already evaluated.
    """
    config = config.resolved()
    out = config.output_dir
    if (out / RESULT_FILE).exists() and not overwrite:
        raise TrainError(f"{out} already holds a finished run ({RESULT_FILE}); pass overwrite to replace it")
    setup = build_trainer(config)
    trainer = setup.trainer
    start = time.perf_counter()
    try:
        output = trainer.train()
    except RuntimeError as e:  # out of memory, bad device: one line, the cause kept for debugging
        raise TrainError(f"training failed: {e}") from e
    runtime = time.perf_counter() - start

    trainer.save_model(str(out))  # adapter and tokenizer
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    trainable, total = trainer.model.get_nb_trainable_parameters()
    result = TrainResult(
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        output_dir=out,
        steps=trainer.state.global_step,
        epochs=float(trainer.state.epoch or 0.0),
        records=setup.records,
        records_too_long=setup.records_too_long,
        final_loss=float(losses[-1]) if losses else float(output.training_loss),
        mean_loss=float(output.training_loss),
        runtime_s=runtime,
        trainable_parameters=trainable,
        total_parameters=total,
        device=setup.device,
        precision=setup.precision,
        chat_template=setup.chat_template,
        versions=_versions(),
    )
    if not math.isfinite(result.final_loss):
        raise TrainError(
            f"training diverged: final loss {result.final_loss}; lower learning_rate (now {config.learning_rate})"
        )
    write_atomic(out / CONFIG_FILE, config.model_dump_json(indent=1) + "\n")
    write_atomic(out / RESULT_FILE, result.model_dump_json(indent=1) + "\n")
    return result


def build_trainer(config: TrainConfig) -> TrainerSetup:
    """A ready TRL ``SFTTrainer`` for ``config`` (not yet trained): records checked and split into
    prompt and answer, base model and tokenizer loaded, LoRA attached by TRL."""
    records = read_records(config.dataset)
    libs = _import_libraries()
    torch, transformers, trl = libs.torch, libs.transformers, libs.trl
    device = _device(config.device, torch)
    precision: Literal["bf16", "fp32"] = "bf16" if config.precision == "bf16" else "fp32"
    if config.precision == "auto" and device == "cuda" and torch.cuda.is_bf16_supported():
        precision = "bf16"

    transformers.set_seed(config.seed)  # before the model: the LoRA matrices are drawn at wrap time
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        config.base_model, trust_remote_code=config.trust_remote_code
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    prepared = _prompt_completion_rows(records, tokenizer, config.max_seq_length)
    if not prepared.rows:
        raise TrainError(f"all {len(records)} records exceed max_seq_length={config.max_seq_length} tokens")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        config.base_model,
        dtype=torch.bfloat16 if precision == "bf16" else torch.float32,
        trust_remote_code=config.trust_remote_code,
    )
    args = trl.SFTConfig(
        output_dir=str(config.output_dir),
        completion_only_loss=True,  # prompt tokens are masked: the loss is on the last message only
        max_length=None,  # over-long records were left out above, so nothing is cut
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps if config.max_steps is not None else -1,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        bf16=precision == "bf16",
        fp16=False,
        use_cpu=device == "cpu",
        seed=config.seed,
        data_seed=config.seed,
        logging_steps=config.logging_steps,
        save_strategy="no",  # the adapter is saved once, at the end, next to its config and result
        report_to="none",
        disable_tqdm=True,
        **_renamed_arguments(trl, config),
    )
    peft_config = libs.peft.LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        task_type="CAUSAL_LM",
    )
    trainer = trl.SFTTrainer(
        model=model,
        args=args,
        train_dataset=libs.datasets.Dataset.from_list(prepared.rows),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    return TrainerSetup(
        trainer, len(prepared.rows), prepared.too_long, device, precision, bool(tokenizer.chat_template)
    )


def _prompt_completion_rows(records: list[list[Message]], tokenizer: Any, max_tokens: int) -> _Prepared:
    """TRL prompt-completion rows (conversational with a chat template, else plain text as the local
    provider renders it) of the records that fit in ``max_tokens``. Too-long records are dropped, not
    truncated: TRL keeps the start, which would cut the end of the answer and its end-of-turn token,
    teaching the model to stop mid-file."""
    rows, too_long = [], 0
    for messages in records:
        context, answer = messages[:-1], messages[-1]
        if tokenizer.chat_template:
            prompt: Any = [m.model_dump() for m in context]
            completion: Any = [answer.model_dump()]
            ids = tokenizer.apply_chat_template(prompt + completion, tokenize=True, return_dict=True)["input_ids"]
        else:
            prompt, completion = plain_prompt(context), " " + answer.content
            ids = tokenizer(prompt + completion + (tokenizer.eos_token or ""))["input_ids"]
        if len(ids) > max_tokens:
            too_long += 1
            continue
        rows.append({"prompt": prompt, "completion": completion})
    return _Prepared(rows, too_long)


def _import_libraries() -> _Libraries:
    modules = {}
    for name in _Libraries._fields:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as e:
            raise TrainError(f"training needs {name} ({e}); install it with: pip install 'ptxbench[train]'") from None
    return _Libraries(**modules)


def _renamed_arguments(trl: ModuleType, config: TrainConfig) -> dict[str, Any]:
    """Settings whose names changed in transformers 5: ``activation_checkpointing`` (the old
    ``gradient_checkpointing`` warns, and TRL's default sets it) and a fractional ``warmup_steps``
    (was ``warmup_ratio``). Older versions get the old names."""
    names = {f.name for f in dataclasses.fields(trl.SFTConfig)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    warmup = "warmup_ratio" if "warmup_ratio" in names else "warmup_steps"  # a float below 1 is a ratio
    return {checkpointing: config.gradient_checkpointing, warmup: config.warmup_ratio}


def _device(requested: str, torch: ModuleType) -> str:
    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise TrainError("device 'cuda' was asked for but torch sees no CUDA GPU; use device = 'cpu' or 'auto'")
    if requested == "auto":
        return "cuda" if available else "cpu"
    return requested


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version(), "ptxbench": __version__}
    for name in _LIBRARIES:
        try:
            versions[name] = getattr(importlib.import_module(name), "__version__", None)
        except ImportError:
            versions[name] = None
    return versions


def _problems(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in error.errors())
