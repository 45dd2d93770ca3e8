from kernelskill.nodes.codeblock import extract_code

MODULE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_last_block_with_model_wins():
    reply = f"first\n```python\nprint(1)\n```\nthen\n```python\n{MODULE}```\n"
    src, problem = extract_code(reply)
    assert src.strip() == MODULE.strip() and problem == ""


def test_unlabelled_fence_and_bare_module():
    assert extract_code(f"```\n{MODULE}```")[0].startswith("import torch")
    assert extract_code(MODULE)[0].startswith("import torch")


def test_garbage():
    assert extract_code("")[1] == "the model returned an empty reply"
    assert "no ```python code block" in extract_code("just words")[1]
    assert "none defines class ModelNew" in extract_code("```python\nx = 1\n```")[1]
    assert extract_code("class ModelNew(:\n  broken")[0] == ""
