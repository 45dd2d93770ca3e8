"""The launch-config sweep rewrites one knob at its single source and leaves unsafe launches alone."""

import ast

import pytest

from kernelskill.engine.sweep import sweep_variants, sweepable_launches
from kernelskill.runner.taskfile import load_source_module

VECTOR_ADD = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
        add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=4)  # launch
        return out
"""

KERNEL = """import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

"""


def forward(body: str) -> str:
    lines = ["class ModelNew(torch.nn.Module):", "    def forward(self, x):", "        out = torch.empty_like(x)"]
    lines += [f"        {line}" for line in body.strip().splitlines()]
    return KERNEL + "\n".join([*lines, "        return out", ""])


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]


def test_literal_block_size_and_num_warps():
    variants = sweep_variants(VECTOR_ADD)
    notes = [note for _, note in variants]
    assert notes == [
        "add_kernel: BLOCK_SIZE 1024->2048",
        "add_kernel: BLOCK_SIZE 1024->512",
        "add_kernel: num_warps 4->8",
        "add_kernel: num_warps 4->2",
    ]
    launch = "add_kernel[grid](x, y, out, n, BLOCK_SIZE={}, num_warps={})  # launch"
    expected = [(2048, 4), (512, 4), (1024, 8), (1024, 2)]
    for (src, _), (block, warps) in zip(variants, expected, strict=True):
        [(old, new)] = changed_lines(VECTOR_ADD, src)  # exactly one line differs, comment kept
        assert old.strip() == launch.format(1024, 4) and new.strip() == launch.format(block, warps)


def test_single_assignment_variable_is_rewritten_at_its_source():
    src = forward("""
BLOCK = 256
n = x.numel()
k[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=4)
""")
    [launch] = sweepable_launches(src)
    assert not launch.skip_reason and launch.knobs[0].via == "BLOCK"
    variants = sweep_variants(src)
    assert variants[0][1] == "k: BLOCK 256->512 (via BLOCK)"
    assert changed_lines(src, variants[0][0]) == [("        BLOCK = 256", "        BLOCK = 512")]


def test_module_constant_and_added_num_warps():
    src = forward("k[(triton.cdiv(x.numel(), TILE),)](x, out, x.numel(), BLOCK=TILE)").replace(
        "@triton.jit", "TILE = 128\n\n\n@triton.jit"
    )
    notes = [note for _, note in sweep_variants(src)]
    assert notes == [
        "k: BLOCK 128->256 (via TILE)",
        "k: BLOCK 128->64 (via TILE)",
        "k: num_warps 4->8 (was unset: Triton's default)",
        "k: num_warps 4->2 (was unset: Triton's default)",
    ]
    added = sweep_variants(src)[2][0]
    assert "BLOCK=TILE, num_warps=8)" in added


def test_variable_assigned_twice_is_left_alone():
    src = forward("""
BLOCK = 256
if x.numel() > 4096:
    BLOCK = 1024
k[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK, num_warps=4)
""")
    [launch] = sweepable_launches(src)
    assert [k.kind for k in launch.knobs] == ["warps"]
    assert launch.ignored == ("BLOCK: BLOCK is bound 2 times in forward()",)
    assert [note for _, note in sweep_variants(src)] == ["k: num_warps 4->8", "k: num_warps 4->2"]


def test_grid_with_a_duplicate_literal_is_skipped():
    src = forward("k[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, num_warps=4)")
    [launch] = sweepable_launches(src)
    assert "1024" in launch.skip_reason
    assert sweep_variants(src) == []
    # The same through variables: the grid's literal is not the block size's source.
    via_names = forward("""
BLOCK = 1024
n_blocks = triton.cdiv(x.numel(), 1024)
grid = (n_blocks,)
k[grid](x, out, x.numel(), BLOCK=BLOCK)
""")
    assert sweepable_launches(via_names)[0].skip_reason and sweep_variants(via_names) == []


def test_positional_tile_and_a_value_shared_with_an_unsafe_launch():
    src = forward("""
BLOCK = 512
k[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK, num_warps=4)
k[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), BLOCK=BLOCK, num_warps=4)
""")
    safe, unsafe = sweepable_launches(src)
    assert safe.knobs[0].name == "BLOCK" and safe.knobs[0].via == "BLOCK" and not safe.skip_reason
    assert unsafe.skip_reason
    # Moving BLOCK would break the second launch's grid, so only the first launch's warps move.
    assert [n for _, n in sweep_variants(src)] == [
        "k: num_warps 4->8 [launch at line 15]",
        "k: num_warps 4->2 [launch at line 15]",
    ]


def test_autotuned_kernel_is_skipped():
    src = forward("k[(1,)](x, out, x.numel())").replace(
        "@triton.jit", '@triton.autotune(configs=[triton.Config({"BLOCK": 256})], key=["n"])\n@triton.jit'
    )
    [launch] = sweepable_launches(src)
    assert launch.kernel == "k" and launch.skip_reason.startswith("autotuned")
    assert sweep_variants(src) == []


def test_jit_with_arguments_is_a_kernel():
    src = forward("k[(1,)](x, out, x.numel(), BLOCK=64, num_warps=1)").replace(
        "@triton.jit", "@triton.jit(do_not_specialize=['n'])"
    )
    assert [note for _, note in sweep_variants(src)] == ["k: BLOCK 64->128", "k: BLOCK 64->32", "k: num_warps 1->2"]


MATMUL = """import torch
import triton
import triton.language as tl


@triton.jit
def mm(
    a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr
):
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a), tl.load(b))
    tl.store(c, acc)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty(1)
        grid = lambda META: (triton.cdiv(64, META["BLOCK_M"]) * triton.cdiv(64, META["BLOCK_N"]),)  # noqa: E731
        mm[grid](a, b, c, 64, 64, 64, BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_SIZE_M=8, num_warps=4, num_stages=3)
        return c
"""


def test_dot_tiles_never_below_16():
    [launch] = sweepable_launches(MATMUL)
    assert [k.name for k in launch.knobs] == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"]
    notes = [note for _, note in sweep_variants(MATMUL, max_variants=20)]
    assert notes == [
        "mm: BLOCK_M 32->64",
        "mm: BLOCK_M 32->16",
        "mm: BLOCK_N 16->32",
        "mm: BLOCK_K 16->32",
        "mm: num_warps 4->8",
        "mm: num_warps 4->2",
        "mm: num_stages 3->4",
        "mm: num_stages 3->2",
    ]


def test_max_variants_caps_in_order():
    assert [n for _, n in sweep_variants(MATMUL, max_variants=3)] == [
        "mm: BLOCK_M 32->64",
        "mm: BLOCK_M 32->16",
        "mm: BLOCK_N 16->32",
    ]
    assert sweep_variants(MATMUL, max_variants=0) == []
    assert len(sweep_variants(MATMUL)) == 6


@pytest.mark.parametrize("source", [VECTOR_ADD, MATMUL])
def test_every_variant_parses_differs_and_is_deterministic(source):
    variants = sweep_variants(source, max_variants=50)
    assert variants and variants == sweep_variants(source, max_variants=50)
    sources = [src for src, _ in variants]
    assert len(set(sources)) == len(sources) and source not in sources
    for src in sources:
        ast.parse(src)


@pytest.mark.parametrize("source", ["", "def broken(:\n", "class ModelNew(:\n  pass", "x = '\0'", "import torch\n"])
def test_unparsable_or_kernel_free_input_gives_nothing(source):
    assert sweep_variants(source) == [] and sweepable_launches(source) == []


def test_variants_run_under_the_interpreter_and_match_torch(tmp_path):
    import torch

    x, y = torch.randn(3000), torch.randn(3000)
    variants = sweep_variants(VECTOR_ADD)
    assert len(variants) == 4
    for i, (src, note) in enumerate(variants):
        path = tmp_path / f"sweep_variant_{i}.py"
        path.write_text(src)
        module = load_source_module(src, f"kernelskill_test_sweep_variant_{i}", str(path))
        out = module.ModelNew()(x, y)
        torch.testing.assert_close(out, x + y, msg=note)
