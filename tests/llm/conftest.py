"""A real local HTTP server that speaks the OpenAI chat-completions and Anthropic messages protocols,
so the tests drive the real SDKs (retries, headers, parsing) through our providers, offline."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports huggingface_hub

ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN")
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@dataclass
class Reply:
    """One scripted answer; ``text=None`` echoes the last message's content."""

    text: str | None = None
    status: int = 200
    delay_s: float = 0.0
    input_tokens: int = 11
    output_tokens: int = 7


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def openai_body(reply: Reply, text: str, model: str) -> dict[str, Any]:
    if reply.status != 200:
        return {"error": {"message": f"scripted {reply.status}", "type": "scripted", "code": None}}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def anthropic_body(reply: Reply, text: str, model: str) -> dict[str, Any]:
    if reply.status != 200:
        return {"type": "error", "error": {"type": "api_error", "message": f"scripted {reply.status}"}}
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


BODIES = {"/v1/chat/completions": openai_body, "/v1/messages": anthropic_body}


class FakeLLMServer:
    """Serves ``script`` in arrival order (echo when empty), records every request, and counts how
    many were in flight at once."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.received: list[Received] = []
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.fake = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def take(self, received: Received) -> Reply:
        with self.lock:
            self.received.append(received)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            return self.script.popleft() if self.script else Reply()

    def release(self) -> None:
        with self.lock:
            self.active -= 1


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        fake: FakeLLMServer = self.server.fake  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = fake.take(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        try:
            time.sleep(reply.delay_s)
            make = BODIES.get(self.path)
            if make is None:
                self.send_error(404)
                return
            text = reply.text if reply.text is not None else body["messages"][-1]["content"]
            payload = json.dumps(make(reply, text, body.get("model", ""))).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("retry-after-ms", "1")  # keep the SDKs' backoff short
            self.end_headers()
            self.wfile.write(payload)
        finally:
            fake.release()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _own_completion_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted servers answer the same prompt differently in different tests: no shared completion cache."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No real keys, base URLs or proxies leak into a test."""
    for var in ENV_VARS + PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
