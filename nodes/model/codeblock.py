"""Pull a candidate module out of a model reply.

A reply is prose around fenced blocks. The module is the Python block defining ``class ModelNew`` that the
prose just before it presents as the answer (final, complete, updated, optimized ...), never one it presents
as the original, the reference or the code before a change; among equals, the last. When that block calls a
kernel or a name that only another block of the reply defines, the blocks are joined in reply order. A reply
cut off inside a block gives no module; ``truncated_code`` returns what was written of it.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

TRUNCATED = "the reply ends inside an unterminated code block (cut off?)"

_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*(.*)$")
_PY_TAG = re.compile(r"(?:py|python)[\d.]*|[\w.-]+\.py")
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.M)
_WINDOW = 300  # characters of prose before a fence that may say what the block is

_NOUN = r"(?:code|version|implementation|module|solution|kernel|program|model|class|source|answer|attempt)s?"
_OLD = r"(?:original|reference|old|previous|baseline|unoptimi[sz]ed|naive|eager)"
# A cue's position is where its match ends: the cue nearest the fence decides.
_GOOD = re.compile(
    r"\b(?:final|complete|full|updated|optimi[sz]ed|fixed|corrected|improved|revised|rewritten|new|fused)\b"
    rf"(?:[ \t]+[\w`-]+){{0,2}}?[ \t]+{_NOUN}\b"
    r"|^\W*(?:after|final|updated|optimi[sz]ed|fixed|solution)\b[^\n.!?]{0,40}$",
    re.I | re.M,
)
_BAD = re.compile(
    r"\bfor (?:comparison|reference)\b"
    rf"|(?:^|[.!?;,]\s)\W*(?:(?:here|below|this|that|it)(?:'s| is| was)\s+)?(?:the |my |your |our )?{_OLD}\b"
    rf"(?:(?:[ \t]+[\w`-]+){{0,2}}?[ \t]+{_NOUN}\b(?=[^.!?\n]*:[ \t]*$)|[ \t]*(?:\([^)\n]*\))?[ \t]*:[ \t]*$)"
    r"|^\W*(?:before|original|reference|old|previous|baseline)\b[^\n.!?]{0,40}$"
    r"|\bbefore (?:the |this )?(?:change|fix|optimi[sz]ation|rewrite|refactor)",
    re.I | re.M,
)


@dataclass(eq=False)
class _Block:
    """One fenced block of a reply."""

    body: str
    python: bool
    closed: bool
    cue: int  # +1 presented as the answer, -1 as the original / "before" code, 0 neither

    @property
    def defines_model(self) -> bool:
        """Whether the block defines ``class ModelNew`` at top level."""
        return bool(_MODEL_NEW.search(self.body))


def extract_code(reply: str) -> tuple[str, str]:
    """Return ``(source, problem)``: the module defining ``ModelNew``, or "" and a one-line reason.

    Args:
        reply: The model's whole answer (prose and fenced blocks, or a bare module).

    Returns:
        The module source and "", or "" and why the reply holds no usable module.
    """
    if not reply.strip():
        return "", "the model returned an empty reply"
    blocks = _blocks(reply)
    python = [b for b in blocks if b.python]
    pool = [b for b in python if b.defines_model or (not b.closed and "triton" in b.body)]
    candidates = [b for b in pool if b.cue >= 0]
    if candidates:
        chosen = ([b for b in candidates if b.cue > 0] or candidates)[-1]
        if not chosen.closed:
            return "", TRUNCATED
        return _merge(chosen, python), ""
    if _MODEL_NEW.search(reply) and _parses(reply):
        return reply.strip() + "\n", ""
    if blocks and not blocks[-1].closed:
        return "", TRUNCATED
    if pool:
        return "", f"the reply has {len(python)} python code block(s) but presents class ModelNew only as old code"
    if python:
        return "", f"the reply has {len(python)} python code block(s) but none defines class ModelNew"
    return "", "the reply contains no ```python code block defining class ModelNew"


def truncated_code(reply: str) -> str:
    """Return the text of an unterminated last Python block (a reply cut off mid-code), else "".

    Args:
        reply: The model's whole answer.

    Returns:
        What the reply wrote of the cut-off block, or "" when its last block is closed or not Python.
    """
    blocks = _blocks(reply)
    return blocks[-1].body if blocks and blocks[-1].python and not blocks[-1].closed else ""


def _blocks(reply: str) -> list[_Block]:
    """The fenced blocks of ``reply`` (backtick or tilde fences), the last possibly unterminated."""
    lines = reply.splitlines(keepends=True)
    blocks: list[_Block] = []
    prose_start = pos = i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        pos += len(line)
        m = _OPEN.match(line.rstrip("\r\n"))
        if not m or (m[2][0] == "`" and "`" in m[3]):
            continue
        indent, fence, info = m.groups()
        prose = reply[prose_start : pos - len(line)][-_WINDOW:]
        body: list[str] = []
        closed = False
        while i < len(lines) and not closed:
            text = lines[i]
            i += 1
            pos += len(text)
            bare = text.strip()
            if bare and set(bare) == {fence[0]} and len(bare) >= len(fence):
                closed = True
                continue
            if fence[0] == "`" and text.rstrip().endswith(fence):  # "    return y```"
                text, closed = text.rstrip()[: -len(fence)] + "\n", True
            body.append(re.sub(rf"^[ \t]{{0,{len(indent)}}}", "", text))
        tag = re.match(r"[\w.+#-]*", info.split()[0].lstrip("{.") if info.split() else "")
        is_python = tag is not None and (tag[0] == "" or bool(_PY_TAG.fullmatch(tag[0].lower())))
        blocks.append(_Block("".join(body), is_python, closed, _cue(prose)))
        prose_start = pos
    return blocks


def _cue(prose: str) -> int:
    """+1 when the prose nearest a fence presents the block as the answer, -1 as old code, else 0."""
    hits = [(m.end(), 1) for m in _GOOD.finditer(prose)] + [(m.end(), -1) for m in _BAD.finditer(prose)]
    return max(hits, key=lambda h: (h[0], -h[1]))[1] if hits else 0


def _merge(chosen: _Block, blocks: list[_Block]) -> str:
    """``chosen`` joined (in reply order) with the blocks defining names it uses but does not define."""
    alone = chosen.body.strip() + "\n"
    after = blocks[blocks.index(chosen) + 1 :]
    sources = [
        b
        for b in blocks
        if b is not chosen
        and b.closed
        and b.cue >= 0
        and not (b in after and b.defines_model)
        and ("ModelNew" not in b.body or b.defines_model)  # not a usage snippet
        and _parses(b.body)
    ]
    parts = [chosen]
    while _parses(source := _join([b for b in blocks if b in parts])):
        missing = _missing(ast.parse(source))
        extra = [b for b in sources if b not in parts and missing & _top_names(ast.parse(b.body))]
        if not extra:
            return source if len(parts) > 1 else alone
        parts += extra
    return alone


def _join(parts: list[_Block]) -> str:
    """Blocks' bodies joined by blank lines, top-level import lines already seen dropped."""
    seen: set[str] = set()
    out: list[str] = []
    for block in parts:
        keep = []
        for line in block.body.strip().splitlines():
            if line.startswith(("import ", "from ")):
                if line.strip() in seen:
                    continue
                seen.add(line.strip())
            keep.append(line)
        out.append("\n".join(keep).strip())
    return "\n\n".join(out) + "\n"


def _missing(tree: ast.Module) -> set[str]:
    """Names the module reads but never binds (nor are builtins)."""
    bound = set(dir(builtins))
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound


def _top_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level (defs, classes, assignments, imports, also under if/try)."""
    names: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With):
            stack += [s for s in ast.iter_child_nodes(node) if isinstance(s, ast.stmt)]
    return names


def _parses(source: str) -> bool:
    """Whether ``source`` is valid Python."""
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True
