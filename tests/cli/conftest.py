"""The command-line tests read what a user sees at 80 columns, paths included: each test's folder is short and of
one length wherever and however the tests run."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A fresh folder like pytest's ``tmp_path``, but ``<temp dir>/ptxb-XXXXXXXX``: pytest's own
    (``pytest-of-USER/pytest-N/[popen-gwK/]<the test's name, up to 30 characters>N``) grows with the user name,
    the run's number, the test's name and the xdist worker, and a path printed past 80 columns is folded by rich
    into two words, which no assertion on the message can then match. Removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="ptxb-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
