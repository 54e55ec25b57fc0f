"""Extraction edge cases: what models really send back."""

from __future__ import annotations

from ptxbench.llm.extract import extract_candidate
from ptxbench.records.completion import ExtractionStatus

KERNEL = '''#include <cuda_bf16.h>
__global__ void k(float* y) { y[threadIdx.x] = 1.f; }
extern "C" int softmax(const __nv_bfloat16* X, __nv_bfloat16* Y, int64_t R, int64_t C, cudaStream_t s) {
    return 0;
}'''


def test_single_fenced_block_with_prose_around_it() -> None:
    text = f"Here is my kernel.\n\n```cuda\n{KERNEL}\n```\n\nIt uses one block per row."
    result = extract_candidate(text, "softmax")
    assert result.status is ExtractionStatus.OK and result.source == KERNEL + "\n"


def test_language_tag_variants_and_tildes() -> None:
    for opening, closing in (("```cpp", "```"), ("```c++", "```"), ("```CUDA", "```"), ("~~~cu", "~~~"), ("```", "```"),
                             ("```cuda title=\"kernel.cu\"", "```")):
        result = extract_candidate(f"{opening}\n{KERNEL}\n{closing}\n", "softmax")
        assert result.ok, opening
        assert "extern \"C\" int softmax" in result.source


def test_missing_closing_fence_takes_the_rest() -> None:
    result = extract_candidate(f"```cuda\n{KERNEL}\n", "softmax")
    assert result.ok and result.source.rstrip().endswith("}")


def test_reasoning_sections_are_ignored() -> None:
    text = "<think>```cuda\n// draft\nextern \"C\" int softmax() {}\n```</think>\n" + f"```cuda\n{KERNEL}\n```"
    result = extract_candidate(text, "softmax")
    assert result.ok and "draft" not in result.source


def test_several_blocks_keep_the_entry_point_and_inline_its_header() -> None:
    header = "#pragma once\n__device__ inline float twice(float x) { return 2 * x; }"
    main = '#include "helpers.cuh"\n' + KERNEL
    text = (f"First the helpers:\n```cuda helpers.cuh\n{header}\n```\nA test harness:\n```python\nprint(1)\n```\n"
            f"And the file:\n```cuda\n{main}\n```")
    result = extract_candidate(text, "softmax")
    assert result.ok
    assert "twice(float x)" in result.source and '#include "helpers.cuh"' not in result.source
    assert any("inlined helpers.cuh" in note for note in result.notes)


def test_later_revision_wins_when_two_blocks_define_the_entry_point() -> None:
    first = KERNEL.replace("return 0;", "return 1;")
    result = extract_candidate(f"```cuda\n{first}\n```\nActually, fixed:\n```cuda\n{KERNEL}\n```", "softmax")
    assert "return 0;" in result.source


def test_crlf_and_indented_fences() -> None:
    indented = "\n".join("    " + line for line in KERNEL.splitlines())
    text = f"1. The kernel:\r\n    ```cuda\r\n{indented}\r\n    ```\r\n".replace("\n", "\r\n")
    result = extract_candidate(text, "softmax")
    assert result.ok and result.source.startswith("#include <cuda_bf16.h>")


def test_unfenced_answer_that_is_plainly_code() -> None:
    result = extract_candidate(KERNEL, "softmax")
    assert result.ok and result.notes


def test_clear_statuses_when_nothing_usable() -> None:
    assert extract_candidate("   ", "softmax").status is ExtractionStatus.EMPTY
    assert extract_candidate("I cannot help with that.", "softmax").status is ExtractionStatus.NO_CODE
    wrong = extract_candidate(f"```cuda\n{KERNEL.replace('softmax', 'soft_max')}\n```", "softmax")
    assert wrong.status is ExtractionStatus.NO_ENTRY_POINT and wrong.blocks_found == 1
    python_only = extract_candidate("```python\nimport torch\n```", "softmax")
    assert python_only.status is ExtractionStatus.NO_CODE
