"""Pull a candidate module out of a model reply."""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(reply: str) -> tuple[str, str]:
    """Return ``(source, problem)``: the code defining ``ModelNew``, or "" and why there is none.

    Takes the last fenced block that defines ``class ModelNew``; failing that, the whole reply when
    it is itself a Python module defining it.
    """
    blocks = [body for lang, body in _FENCE.findall(reply) if lang.lower() in ("", "python", "py")]
    with_model = [b for b in blocks if re.search(r"^class\s+ModelNew\b", b, re.M)]
    if with_model:
        return with_model[-1].strip() + "\n", ""
    if re.search(r"^class\s+ModelNew\b", reply, re.M):
        try:
            ast.parse(reply)
            return reply.strip() + "\n", ""
        except SyntaxError:
            pass
    if not reply.strip():
        return "", "the model returned an empty reply"
    if blocks:
        return "", f"the reply has {len(blocks)} code block(s) but none defines class ModelNew"
    return "", "the reply contains no ```python code block defining class ModelNew"
