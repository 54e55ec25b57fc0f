"""A local Hugging Face causal LM (optionally with a LoRA adapter), for evaluating fine-tuned models
without a server. ``generate`` blocks, so it runs in a worker thread, one at a time: the model is
shared and a GPU gains nothing from interleaved single-prompt calls.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from ptxbench.llm.providers.base import check_model, require_sdk
from ptxbench.llm.types import CompletionRequest
from ptxbench.prompts.conversation import Message
from ptxbench.records.completion import Completion, Usage


def plain_prompt(messages: list[Message]) -> str:
    """Role-prefixed turns, for tokenizers without a chat template (base models)."""
    turns = [f"{m.role}: {m.content}" for m in messages]
    return "\n\n".join(turns) + "\n\nassistant:"


class HFLocalProvider:
    def __init__(
        self,
        name: str,
        *,
        kind: str = "hf",
        adapter: str | None = None,
        device: str | None = None,
        dtype: str = "auto",
        trust_remote_code: bool = False,
    ) -> None:
        torch = require_sdk("torch", "train", kind)
        transformers = require_sdk("transformers", "train", kind)
        self.spec = f"{kind}:{name}"
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
        model = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=dtype, trust_remote_code=trust_remote_code)
        if adapter:
            peft = require_sdk("peft", "train", kind)
            model = peft.PeftModel.from_pretrained(model, adapter)
        self.model = model.to(self.device).eval()
        self._lock = threading.Lock()

    def _encode(self, messages: list[Message]) -> Any:
        if self.tokenizer.chat_template:
            chat = [{"role": m.role, "content": m.content} for m in messages]
            text = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            return self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        return self.tokenizer(plain_prompt(messages), return_tensors="pt")

    def _generate(self, request: CompletionRequest) -> Completion:
        import torch

        p = request.params
        sampling: dict[str, Any] = {"do_sample": False}
        if p.temperature > 0:
            sampling = {"do_sample": True, "temperature": p.temperature, "top_p": p.top_p or 1.0}
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with self._lock:
            start = time.perf_counter()
            inputs = self._encode(request.messages).to(self.device)
            # Seeded by the request, so a rerun without the cache draws the same sample.
            torch.manual_seed(int(request.cache_key()[:15], 16))
            with torch.inference_mode():
                out = self.model.generate(**inputs, max_new_tokens=p.max_tokens, pad_token_id=pad, **sampling)
            new = out[0, inputs["input_ids"].shape[1] :]
            latency = time.perf_counter() - start
        ended = len(new) > 0 and int(new[-1]) == self.tokenizer.eos_token_id
        return Completion(
            model=request.model,
            text=self.tokenizer.decode(new, skip_special_tokens=True),
            finish_reason="stop" if ended or len(new) < p.max_tokens else "length",
            usage=Usage(input_tokens=inputs["input_ids"].shape[1], output_tokens=len(new), cost_usd=0.0),
            latency_s=latency,
        )

    async def complete(self, request: CompletionRequest) -> Completion:
        check_model(request, self.spec)
        return await asyncio.to_thread(self._generate, request)
