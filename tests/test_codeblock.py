import ast

import pytest

from kernelskill.nodes.model.codeblock import TRUNCATED, extract_code, truncated_code

MODULE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]
"""

KERNEL = """import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)
"""

LAUNCHER = """import torch
import triton


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
"""

FAST = MODULE.replace("pass", "def forward(self, x):\n        return fast(x)")
SLOW = MODULE.replace("pass", "def forward(self, x):\n        return slow(x)")


def fence(source: str, tag: str = "python") -> str:
    return f"```{tag}\n{source.strip()}\n```"


def test_last_block_with_model_wins():
    reply = f"first\n```python\nprint(1)\n```\nthen\n```python\n{MODULE}```\n"
    src, problem = extract_code(reply)
    assert src.strip() == MODULE.strip() and problem == ""


def test_unlabelled_fence_and_bare_module():
    assert extract_code(f"```\n{MODULE}```")[0].startswith("import torch")
    assert extract_code(MODULE)[0].startswith("import torch")


def test_garbage():
    assert extract_code("")[1] == "the model returned an empty reply"
    assert extract_code("  \n")[1] == "the model returned an empty reply"
    assert "no ```python code block" in extract_code("just words")[1]
    assert "none defines class ModelNew" in extract_code("```python\nx = 1\n```")[1]
    assert extract_code("class ModelNew(:\n  broken")[0] == ""


@pytest.mark.parametrize(
    "opening",
    ["```python", "```py", "```python3", "```Python", "```py3", "```", '```python title="model_new.py"', "~~~python"],
)
def test_python_like_fences(opening):
    close = opening[:3]
    reply = f"Here is my answer.\n\n{opening}\n{MODULE}{close}\n\nIt should be faster."
    assert extract_code(reply) == (MODULE, "")


def test_more_fence_spellings():
    assert extract_code(f"```python:model_new.py\n{MODULE}```")[0] == MODULE
    assert extract_code(f"```model_new.py\n{MODULE}```")[0] == MODULE
    assert extract_code(f"````python\n{MODULE}````")[0] == MODULE
    indented = "1. The module:\n\n   ```python\n" + "".join(f"   {line}\n" for line in MODULE.splitlines()) + "   ```\n"
    assert ast.parse(extract_code(indented)[0])
    assert extract_code(f"```python\n{MODULE.rstrip()}```")[0] == MODULE  # closing fence on the last line


@pytest.mark.parametrize("tag", ["bash", "text", "json", "cuda", "cpp", "c++"])
def test_other_languages_are_not_python(tag):
    src, problem = extract_code(f"Run this:\n\n{fence(MODULE, tag)}\n")
    assert src == "" and problem == "the reply contains no ```python code block defining class ModelNew"


def test_python3_block_is_never_dropped():
    reply = f"Here is the original for reference:\n\n{fence(REFERENCE)}\n\nand the optimized version:\n\n"
    reply += fence(FAST, "python3") + "\n"
    assert extract_code(reply) == (FAST, "")


def test_reference_repeat_is_not_the_answer():
    reply = f"The task:\n{fence(REFERENCE)}\n\nMy kernel:\n{fence(FAST)}\n\nThe reference, again:\n{fence(REFERENCE)}"
    assert extract_code(reply)[0] == FAST
    src, problem = extract_code(f"I would keep it as is:\n{fence(REFERENCE)}")
    assert src == "" and problem == "the reply has 1 python code block(s) but none defines class ModelNew"


def test_after_then_before_takes_after():
    reply = f"**After** (fused):\n\n{fence(FAST)}\n\n**Before:**\n\n{fence(SLOW)}\n"
    assert extract_code(reply)[0] == FAST
    reply = f"Here's the updated code:\n{fence(FAST)}\n\nFor comparison, the previous version was:\n{fence(SLOW)}\n"
    assert extract_code(reply)[0] == FAST
    reply = f"Here is the complete code:\n{fence(FAST)}\nAnd here is the old code:\n{fence(SLOW)}\n"
    assert extract_code(reply)[0] == FAST


def test_final_block_wins_over_a_later_one():
    reply = f"Here is the final implementation:\n\n{fence(FAST)}\n\nAn alternative I tried:\n\n{fence(SLOW)}\n"
    assert extract_code(reply)[0] == FAST
    reply = f"A first draft:\n{fence(SLOW)}\nA second draft:\n{fence(FAST)}\n"
    assert extract_code(reply)[0] == FAST  # no cue: the last one


def test_prose_mentioning_the_original_does_not_demote_the_fix():
    reply = f"The original code has a bug: it never masks the tail.\n\n{fence(FAST)}\n"
    assert extract_code(reply)[0] == FAST
    reply = f"The previous kernel read past the end. Here is the fixed version:\n{fence(FAST)}"
    assert extract_code(reply)[0] == FAST
    reply = f"Here is the optimized version, 3x faster than the original PyTorch code:\n{fence(FAST)}"
    assert extract_code(reply)[0] == FAST


def test_only_old_code_is_reported():
    src, problem = extract_code(f"Before:\n{fence(SLOW)}\n\nI could not improve it.")
    assert src == "" and "presents class ModelNew only as old code" in problem and "\n" not in problem


def test_kernel_block_merged_with_module_block():
    reply = (
        f"First the kernel:\n\n{fence(KERNEL)}\n\nThen the module that launches it:\n\n{fence(LAUNCHER)}\n\n"
        "Usage:\n\n```python\nmodel = ModelNew()\nimport torch\nx = torch.randn(8)\n```\n"
    )
    src, problem = extract_code(reply)
    assert problem == "" and src.index("def add_kernel") < src.index("class ModelNew")
    assert src.count("import torch\n") == 1 and src.count("import triton\n") == 1
    assert "model = ModelNew()" not in src and "\n\n\n\n" not in src  # the usage snippet stays out
    namespace: dict = {}
    exec(compile(src, "<reply>", "exec"), namespace)  # parses and binds every name
    assert "add_kernel" in namespace and "ModelNew" in namespace


def test_merge_follows_wrappers_and_imports():
    helpers = "def add(a, b):\n    return launch_add(a, b)\n"
    launch = "def launch_add(a, b):\n    return torch.add(a, b)\n"
    module = "class ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return add(a, b)\n"
    reply = f"{fence('import torch')}\n{fence(launch)}\n{fence(helpers)}\nThe module:\n{fence(module)}\n"
    src = extract_code(reply)[0]
    namespace: dict = {}
    exec(compile(src, "<reply>", "exec"), namespace)
    assert namespace["ModelNew"]().forward(1, 2) is not None


def test_merge_only_when_needed():
    reply = f"Kernel:\n{fence(KERNEL)}\nModule:\n{fence(FAST)}\n"  # FAST does not use add_kernel
    assert extract_code(reply)[0] == FAST
    reply = f"Original kernel for reference:\n{fence(KERNEL)}\nModule:\n{fence(LAUNCHER)}\n"
    assert extract_code(reply)[0] == LAUNCHER  # never pulls code from the "before" block


def test_merge_that_does_not_parse_falls_back():
    broken = "import triton\n\ndef add_kernel(:\n    pass\n"
    reply = f"{fence(broken)}\n{fence(LAUNCHER)}\n"
    assert extract_code(reply)[0] == LAUNCHER


def test_unterminated_fence():
    cut = "import torch\nimport triton\n\n@triton.jit\ndef k(x_ptr, n):\n    offs = tl.arange(0, "
    reply = f"Here is the optimized version:\n\n```python\n{cut}"
    assert extract_code(reply) == ("", TRUNCATED)
    assert truncated_code(reply) == cut
    reply = f"Here is the original for reference:\n{fence(REFERENCE)}\nand the complete code:\n```python3\n{MODULE}"
    assert extract_code(reply) == ("", TRUNCATED) and truncated_code(reply) == MODULE
    reply = f"Old:\n{fence(SLOW)}\nNew module:\n```python\n{MODULE}"
    assert extract_code(reply) == ("", TRUNCATED)


def test_unterminated_other_fence():
    reply = f"{fence(FAST)}\n\nRun it with:\n\n```bash\npython bench.py --"
    assert extract_code(reply) == (FAST, "") and truncated_code(reply) == ""
    assert extract_code("Let me write the kernel.\n\n```cuda\n__global__ void k(") == ("", TRUNCATED)
    assert truncated_code(f"{fence(FAST)}\n") == "" and truncated_code("") == ""
