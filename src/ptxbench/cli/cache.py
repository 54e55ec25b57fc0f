"""``ptxbench cache info|prune|clear``: the build cache's size, and removing entries (oldest use first)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ptxbench.cli.output import console, entries, fail

app = typer.Typer(no_args_is_help=True, help="The build cache: its size, and removing entries (oldest use first).")


@app.command("info")
def cache_info(as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False) -> None:
    """Where the build cache is, how many entries and bytes it holds, and its size limit."""
    from ptxbench.toolchain.build_cache import MAX_SIZE_VARIABLE, human, info

    held = info()
    if as_json:
        print(held.model_dump_json(indent=2))
        return
    limit = "no limit" if held.max_bytes is None else f"limit {human(held.max_bytes)}"
    console.print(f"build cache: {held.location}", highlight=False)
    console.print(f"{entries(held.entries)}, {human(held.bytes)} ({limit}; {MAX_SIZE_VARIABLE} sets it)",
                  highlight=False)
    if held.entries:
        console.print(f"last used: oldest {held.oldest_use}, newest {held.newest_use}", highlight=False)
    if held.unfinished:
        console.print(f"{held.unfinished} folder(s) of builds in progress or interrupted", highlight=False)


@app.command("prune")
def cache_prune(max_size: Annotated[Optional[str], typer.Option("--max-size", help="Keep at most this much, e.g. "
                                                                "500M or 2G [default: the cache's limit]")] = None
                ) -> None:
    """Remove build cache entries, the longest unused first, until the cache is within a size."""
    from ptxbench.toolchain.build_cache import cache_dir, human, max_bytes, parse_size, prune

    limit = parse_size(max_size) if max_size is not None else max_bytes()
    if limit is None:
        fail("the build cache has no size limit: give --max-size SIZE")
    done = prune(limit)
    console.print(f"removed {entries(done.removed)} ({human(done.freed_bytes)}), the longest unused first; "
                  f"{entries(done.entries)} ({human(done.bytes)}) left in {cache_dir()}", highlight=False)


@app.command("clear")
def cache_clear() -> None:
    """Remove every build cache entry (baseline times and the integrity key are kept)."""
    from ptxbench.toolchain.build_cache import cache_dir, clear, human

    done = clear()
    console.print(f"removed {entries(done.removed)} ({human(done.freed_bytes)}) from {cache_dir()}", highlight=False)
