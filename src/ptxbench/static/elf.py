"""Read what a built shared object exports and links, from its bytes, without running it."""

from __future__ import annotations

from io import BytesIO

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile


def dynamic_symbols(shared_object: bytes) -> set[str]:
    """Names of the functions and objects the shared object defines and exports."""
    elf = ELFFile(BytesIO(shared_object))
    table = elf.get_section_by_name(".dynsym")
    if table is None:
        return set()
    return {s.name for s in table.iter_symbols() if s.name and s["st_shndx"] != "SHN_UNDEF"}


def needed_libraries(shared_object: bytes) -> list[str]:
    """DT_NEEDED entries: the shared libraries the loader will pull in."""
    elf = ELFFile(BytesIO(shared_object))
    return [
        tag.needed
        for section in elf.iter_sections()
        if isinstance(section, DynamicSection)
        for tag in section.iter_tags()
        if tag.entry.d_tag == "DT_NEEDED"
    ]
