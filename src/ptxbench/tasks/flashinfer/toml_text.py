"""Task data written as a TOML file laid out like the suite's (long texts as literal blocks)."""

from __future__ import annotations

import json
from typing import Any

_TABLES = ("axes", "inputs", "outputs", "workloads")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k) if not k.isidentifier() else k} = {_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _text(text: str) -> str:
    return f"'''\n{text}\n'''" if "'''" not in text and "\r" not in text else json.dumps(text, ensure_ascii=False)


def to_toml(data: dict[str, Any]) -> str:
    lines = []
    for key, value in data.items():
        if key in ("statement", "reference"):
            lines.append(f"{key} = {_text(value)}")
        elif key not in _TABLES and key != "requirements":
            lines.append(f"{key} = {_value(value)}")
    for key in _TABLES:
        for table in data[key]:
            lines += ["", f"[[{key}]]"] + [f"{k} = {_value(v)}" for k, v in table.items()]
    for arch, requirements in data["requirements"].items():
        for requirement in requirements:
            lines += ["", f"[[requirements.{arch}]]"] + [f"{k} = {_value(v)}" for k, v in requirement.items()]
    return "\n".join(lines) + "\n"
