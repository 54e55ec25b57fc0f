"""``--arch`` reaches every command as an ``Arch``, whatever the installed typer does with option callbacks."""

from __future__ import annotations

import pytest
import typer

from ptxbench.arch.registry import Arch
from ptxbench.cli.options import TargetArch, benchmark_arch


def test_the_arch_option_has_no_callback_that_could_replace_its_value() -> None:
    """Seen on the H200: an older typer turned the Arch an option callback returned into None (its enum
    converter looked the member up by str()), and `ptxbench eval` failed on its first build."""
    (option,) = [m for m in TargetArch.__metadata__ if isinstance(m, typer.models.OptionInfo)]
    assert option.callback is None


def test_the_commands_refuse_a_plain_target_with_the_reason() -> None:
    assert benchmark_arch(Arch.SM_90A) is Arch.SM_90A
    with pytest.raises(typer.Exit):
        benchmark_arch(Arch.SM_90)
