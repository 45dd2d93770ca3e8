"""Static checks on a candidate's source, before it runs (stdlib only).

Strict findings reject the candidate: no custom kernel at all, a try/except around the work in
``forward`` (a silent fallback to PyTorch), patching timers / CUDA events / synchronize,
rebinding anything under ``torch`` / ``F`` / ``nn`` or changing a global numerics setting (the
reference runs in the same process, so either would change what it computes), threads or
processes, extra CUDA streams, looking around the reviewer's process (frames, the garbage collector,
``sys.modules``, the reviewer's own package), array libraries beside PyTorch, ``.numpy()``.
Warnings are recorded on the review: PyTorch compute ops left in ``forward`` (the candidate is then
labelled ``torch_main_work`` when the heavy op of the reference, a matmul / convolution / attention,
still runs in PyTorch).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .dot_precision import TF32, dot_precisions
from .result import NOT_CUSTOM_LABELS

# The first line of the last-resort candidate that composes the reference's own ops: accepted without
# a kernel, and always labelled torch_main_work (never a custom-kernel success).
REFERENCE_FALLBACK_MARK = "kernelskill reference fallback"
NO_KERNEL = "no custom kernel: neither a @triton.jit kernel using tl.* nor CUDA __global__ code via load_inline"
HEAVY_OPS = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention",
    "multi_head_attention_forward", "lstm", "gru", "rnn",
}  # fmt: skip
LIGHT_OPS = {
    "relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "group_norm",
    "batch_norm", "instance_norm", "sum", "mean", "max", "min", "exp", "log", "sqrt", "rsqrt", "var",
    "std", "norm", "cumsum", "cumprod", "argmax", "argmin", "max_pool2d", "avg_pool2d", "dropout",
    "cross_entropy", "mse_loss", "softplus", "leaky_relu", "hardswish", "elu", "clamp", "where", "pow",
}  # fmt: skip
HEAVY_MODULES = ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose", "MultiheadAttention", "LSTM", "GRU", "RNN")
_OWN_ROOTS = ("self", "tl", "triton")  # calls of these are the candidate's own (or Triton's), not PyTorch's
# Names a candidate must not rebind: PyTorch's functions and global numerics flags are shared with
# the reference in the same process (a patched torch.matmul or allow_tf32 changes what it computes).
TORCH_ROOTS = ("torch", "F", "nn")
SHARED_TORCH = "PyTorch is shared with the reference; patching it is not allowed"
NUMERICS_CALLS = re.compile(
    r"^torch\.(set_default_dtype|set_default_tensor_type|set_float32_matmul_precision|set_flush_denormal)$"
)
TIMER_TARGETS = re.compile(
    r"^(torch\.cuda\.(Event|synchronize|current_stream|Stream)|time\.(time|perf_counter|monotonic)\w*|"
    r"triton\.testing\.do_bench\w*|torch\.cuda\.Event\.\w+)$"
)
THREAD_MODULES = ("threading", "multiprocessing", "concurrent", "_thread", "asyncio", "subprocess")
# The reviewer runs the candidate in its own process, next to the reference, its outputs and its own code: a
# candidate that looks around that process (frames, the garbage collector's objects, loaded modules, the
# reviewer's package) could return the reference's answer or change the judge. Its output must come from its
# inputs alone.
INTROSPECTION_MODULES = ("gc", "inspect", "importlib", "builtins", "kernelskill", "ctypes.util", "__main__")
INTROSPECTION_ATTRS = {
    "_getframe", "_current_frames", "f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame",
    "get_objects", "get_referrers", "get_referents", "settrace", "setprofile", "pythonapi",
}  # fmt: skip
INTROSPECTION_NAMES = {"__import__", "__builtins__", "vars", "locals"}
INTROSPECTS = "reads the reviewer's process beyond its inputs; a candidate's output must come from its inputs"
# PyTorch's switches and probes of its dispatch modes and profiler: the reviewer records what a call ran through
# them, so a candidate that reads them can run its own kernels only while watched, and one that sets them hides
# its PyTorch work from the record. Found as names, attributes and strings (``getattr(torch._C, "...")``).
INSTRUMENT_NAMES = {
    "_DisableTorchDispatch", "_DisableTorchFunction", "_DisableTorchFunctionSubclass", "_EnableTorchFunction",
    "_ExcludeDispatchKeyGuard", "_IncludeDispatchKeyGuard", "_ForceDispatchKeyGuard", "_PreserveDispatchKeyGuard",
    "_AutoDispatchBelowADInplaceOrView", "_AutoDispatchBelowAutograd", "_AutoDispatchBelowPython",
    "_disable_current_modes", "_len_torch_dispatch_stack", "_len_torch_function_stack", "_get_dispatch_stack_at",
    "_get_function_stack_at", "_pop_torch_dispatch_stack", "_pop_torch_function_stack", "_push_on_torch_dispatch_stack",
    "_push_on_torch_function_stack", "_get_current_dispatch_mode", "_get_current_dispatch_mode_stack",
    "_get_dispatch_mode", "_set_dispatch_mode", "_unset_dispatch_mode", "is_in_torch_dispatch_mode",
    "_is_torch_function_mode_enabled", "_is_profiler_enabled", "_profiler_enabled",
    "_dispatch_tls_local_exclude_set", "_dispatch_tls_local_include_set", "_dispatch_tls_is_dispatch_key_excluded",
    "_dispatch_tls_set_dispatch_key_excluded", "_dispatch_tls_is_dispatch_key_included",
    "_dispatch_tls_set_dispatch_key_included",
}  # fmt: skip
INSTRUMENTS = "probes or switches off PyTorch's dispatch modes or profiler, through which the reviewer records what ran"
# Array libraries beside PyTorch: work done there is neither the candidate's kernels nor visible to the labels;
# a dummy kernel launched beside it would otherwise pass as a custom-kernel success. NumPy itself may be imported
# (tasks compute constants with it in __init__); tensor data moved to it is rejected (``.numpy()`` here, any
# conversion during the candidate's calls in the reviewer: worker.host_arrays_watch).
HOST_ARRAY_MODULES = ("scipy", "jax", "jaxlib", "tensorflow", "cupy", "pandas", "sklearn", "numba")
# Ways out of what the static checks can read or of the reviewer's protocol: code run from a string, files,
# the process's exit or its arguments and stdin (where the reviewer gets what seals its result), raw memory.
ESCAPES = "reaches outside the candidate's computation (code from a string, files, the process itself); not allowed"
ESCAPE_CALLS = re.compile(
    r"^(os\.(_exit|kill|killpg|abort|fork|forkpty|system|popen|exec\w*|spawn\w*|posix_spawn\w*|open|read|write|"
    r"pread|pwrite|dup2?|pipe|fdopen)|io\.FileIO|(\w+\.)*(open|read_text|read_bytes|write_text|write_bytes))$"
)
# PyTorch's compilers: a candidate compiling PyTorch ops at run time has the compiler's kernels do its work (and
# under the reviewer's record they fall back to the PyTorch ops). The compiler seeds' own runtime imports
# (torch._inductor.runtime, async_compile, torch._C._dynamo.guards) are not among these.
RUNTIME_COMPILERS = re.compile(
    r"^torch\.(compile|jit\.(script|trace|trace_module|freeze|optimize_for_inference|fuser)|export(\.\w+)?|"
    r"_dynamo(\.\w+)*|_inductor\.(compile|aot_compile|standalone_compile|compile_fx(\.\w+)*))$"
)
COMPILES = "compiles PyTorch ops at run time (torch.compile, TorchDynamo, TorchScript, export): write the kernels"
HOST_WORK = "work outside the candidate's own kernels (on the host or in another array library) is not allowed"
_GEMMS = r"mm|bmm|addmm|baddbmm|addmv|mv|dot|matmul|linear"
LIBRARY_GEMMS = re.compile(rf"^({_GEMMS})$")  # the GEMMs of HEAVY_LIBRARY_OPS (cuBLAS)
HEAVY_LIBRARY_OPS = re.compile(
    rf"^({_GEMMS}|_?convolution\w*|conv\w*|cudnn\w*|_cudnn\w*|miopen\w*|"
    r"_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|_?lstm\w*|_?gru\w*|_?rnn\w*|"
    r"_int_mm|_scaled_mm|_transformer_\w*|_native_multi_head_attention)$"
)  # library calls (cuBLAS / cuDNN / fused attention / PyTorch's fused transformer layers) that do a task's main work


@dataclass
class StaticReport:
    """Findings of the static checks."""

    strict: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    kernels: int = 0
    kernel_names: list[str] = field(default_factory=list)
    default_precision_dots: bool = False  # tl.dot without a precision: TF32 when the data is fp32
    cuda_names: list[str] = field(default_factory=list)  # __global__ functions built by load_inline (in code)

    @property
    def ok(self) -> bool:
        """No strict finding."""
        return not self.strict


def dotted_name(node: ast.AST) -> str:
    """``torch.nn.functional.relu`` for an attribute chain (calls see through to their callee)."""
    if isinstance(node, ast.Attribute):
        return f"{dotted_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return dotted_name(node.func)
    return ""


_dotted = dotted_name


def embedded_kernel_trees(tree: ast.AST) -> list[ast.Module]:
    """Kernel modules passed as source strings, as TorchInductor's output does.

    ``name = async_compile.triton('name', \'\'\'...@triton.jit def name(...)...\'\'\', ...)``: the
    kernel's code is the second argument.
    """
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and _dotted(n.func).endswith("async_compile.triton") and len(n.args) >= 2:
            src = n.args[1]
            if isinstance(src, ast.Constant) and isinstance(src.value, str):
                try:
                    out.append(ast.parse(src.value))
                except SyntaxError:
                    continue
    return out


def library_calls(tree: ast.AST) -> list[tuple[str, int]]:
    """Calls into library kernels anywhere in the module: ``extern_kernels.X`` and ATen ops (name, line)."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            parts = _dotted(n.func).split(".")
            for lib in ("extern_kernels", "aten"):  # extern_kernels.mm(...), torch.ops.aten.mm.default(...)
                if lib in parts[:-1]:
                    out.append((parts[parts.index(lib) + 1], n.lineno))
                    break
    return out


def _kernels(tree: ast.AST) -> list[ast.FunctionDef]:
    out = []
    for n in [x for t in [tree, *embedded_kernel_trees(tree)] for x in ast.walk(t)]:
        if isinstance(n, ast.FunctionDef) and any("jit" in _dotted(d) for d in n.decorator_list):
            if any(_dotted(c.func).startswith("tl.") for c in ast.walk(n) if isinstance(c, ast.Call)):
                out.append(n)
    return out


_GLOBAL_FN = re.compile(r"__global__\s+(?:[\w:<>,\s]*?\s)?(\w+)\s*\(")


def cuda_kernels(tree: ast.Module) -> list[str]:
    """Names of the ``__global__`` functions in the string constants of a module that calls ``load_inline``.

    Read from the syntax tree, so a comment naming ``load_inline`` or ``__global__`` (an error message quoted in
    a header, say) does not make a source without kernels count as CUDA. A declaration whose name cannot be
    read counts as ``""``.
    """
    builds = any(
        (isinstance(n, ast.Name) and n.id == "load_inline")
        or (isinstance(n, ast.Attribute) and n.attr == "load_inline")
        or (isinstance(n, ast.alias) and n.name == "load_inline")
        for n in ast.walk(tree)
    )
    if not builds:
        return []
    names: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            for part in n.value.split("__global__")[1:]:
                m = _GLOBAL_FN.match("__global__" + re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", part))
                names.append(m.group(1) if m else "")
    return names


def _submodule_types(cls: ast.ClassDef) -> dict[str, str]:
    """``self.NAME = nn.Conv2d(...)`` assignments: NAME -> constructor name."""
    types: dict[str, str] = {}
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and _dotted(t.value) == "self":
                    types[t.attr] = _dotted(n.value.func).rsplit(".", 1)[-1]
    return types


def _class_chain(tree: ast.Module, name: str) -> list[ast.ClassDef]:
    """Class ``name`` and the bases it inherits from that the module itself defines, nearest first."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    chain: list[ast.ClassDef] = []
    while name in classes and classes[name] not in chain:
        chain.append(classes[name])
        name = next((_dotted(b) for b in classes[name].bases if _dotted(b) in classes), "")
    return chain


def _forwards(tree: ast.Module, class_name: str) -> tuple[list[ast.FunctionDef], dict[str, str]]:
    """The ``forward`` bodies that run for ``class_name``, and the submodule types its class chain assigns.

    Its own forward, else the one it inherits; a forward that calls ``super().forward`` (or ``Base.forward``)
    runs the base's too. Submodules: ``self.NAME = nn.Conv2d(...)`` anywhere in the chain.
    """
    chain = _class_chain(tree, class_name)
    subs: dict[str, str] = {}
    for cls in reversed(chain):
        subs.update(_submodule_types(cls))
    fns: list[ast.FunctionDef] = []
    for cls in chain:
        fn = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
        if fn is None:
            continue
        fns.append(fn)
        bases = {c.name for c in chain} | {"super"}
        calls_up = any(
            isinstance(n, ast.Call) and _dotted(n.func).rpartition(".")[::2] in {(b, "forward") for b in bases}
            for n in ast.walk(fn)
        )  # super().forward(x) or Base.forward(self, x): the base's forward runs too
        if not calls_up:
            break
    return fns, subs


def forward_compute_ops(source: str, class_name: str) -> set[str]:
    """Names (last part) of PyTorch compute calls in ``class_name.forward`` (inherited forwards included)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    ops: set[str] = set()
    fns, subs = _forwards(tree, class_name)
    for fn in fns:
        for n in ast.walk(fn):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                ops.add("matmul")
            if isinstance(n, ast.Call):
                root, _, tail = _dotted(n.func).rpartition(".")
                if root == "self" and tail in subs:
                    ops.add(subs[tail].lower())
                elif tail in HEAVY_OPS | LIGHT_OPS and not root.startswith(("tl", "triton")):
                    ops.add(tail)
    return ops


def check_source(source: str, reference: str | None = None) -> StaticReport:
    """Run every static check on ``source`` (and compare its forward with the reference's)."""
    report = StaticReport()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return report  # the import reports the syntax error with its line
    _check_kernels(report, tree, source)
    _check_tampering(report, tree, source)
    _check_introspection(report, tree)
    _check_escapes(report, tree, reference)
    _check_compilers(report, tree)
    for op, line in library_calls(tree):
        if HEAVY_LIBRARY_OPS.match(op):
            report.warnings.append(f"library call {op} (line {line}): the main work runs in cuBLAS / cuDNN")
            _label(report, "library_main_work")
    _check_forward(report, tree)
    _check_graph_capture(report, tree)
    precisions = dot_precisions(source)
    if precisions & TF32:
        label_tf32(report)
    report.default_precision_dots = "default" in precisions
    if reference is not None:
        ref_ops = forward_compute_ops(reference, "Model")
        cand_ops = forward_compute_ops(source, "ModelNew")
        if ref_ops and ref_ops <= cand_ops:
            report.warnings.append(
                f"forward still calls every PyTorch op of the reference ({', '.join(sorted(ref_ops))})"
            )
            _label(report, "torch_main_work")
    return report


def _check_kernels(report: StaticReport, tree: ast.Module, source: str) -> None:
    """A custom kernel must exist and be launched (the reference fallback is labelled instead)."""
    kernels = _kernels(tree)
    report.cuda_names = cuda_kernels(tree)
    cuda = bool(report.cuda_names)
    report.kernels = len(kernels) + len(report.cuda_names)
    report.kernel_names = [k.name for k in kernels]
    if not kernels and not cuda and REFERENCE_FALLBACK_MARK in source[:400]:
        report.warnings.append("reference fallback: the reference's own PyTorch ops (no custom kernel)")
        _label(report, "torch_main_work")
    elif not kernels and not cuda:
        report.strict.append(NO_KERNEL)
    elif kernels and not cuda and any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(tree)):
        names = {k.name for k in kernels}
        launched = {
            _dotted(n.func.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
        }
        # Inductor launches its kernels as NAME.run(...) and a user-defined one as NAME_<i>.run(...)
        launch = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")(_\d+)?\.(run|warmup)\(")
        if not names & launched and not launch.search(source):
            report.strict.append(f"kernels {sorted(names)} are defined but never launched (kernel[grid](...))")


def _check_tampering(report: StaticReport, tree: ast.Module, source: str) -> None:
    """No threads, no patched timers or torch state, no global numerics settings, no extra streams."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            imported = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            for name in imported:
                if name.split(".")[0] in THREAD_MODULES:
                    report.strict.append(f"imports {name}: threads / processes can hide work from the timer")
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                name = _dotted(t)
                if TIMER_TARGETS.match(name):
                    report.strict.append(f"assigns {name}: patching timers or synchronization is not allowed")
                elif "." in name and name.split(".")[0] in TORCH_ROOTS:
                    report.strict.append(f"assigns {name}: {SHARED_TORCH}")
        elif isinstance(n, ast.Call):
            name = _dotted(n.func)
            target = _dotted(n.args[0]) if n.args else ""
            setter = name in ("setattr", "monkeypatch.setattr")
            if setter and target.startswith(("torch.cuda", "time", "triton.testing")):
                report.strict.append(f"setattr on {target}: patching timers is not allowed")
            elif setter and target.split(".")[0] in TORCH_ROOTS:
                report.strict.append(f"setattr on {target}: {SHARED_TORCH}")
            if NUMERICS_CALLS.match(name):
                report.strict.append(f"calls {name}: a global numerics setting changes the reference too")
            if re.search(r"(^|\.)(Stream|stream|ExternalStream)$", name) and "cuda" in name:
                report.strict.append(f"calls {name}: work on extra streams escapes the timer")
    if re.search(r"cudaStreamCreate|cudaStreamNonBlocking", source):
        report.strict.append("CUDA source creates streams: work on extra streams escapes the timer")


def _check_compilers(report: StaticReport, tree: ast.Module) -> None:
    """No PyTorch compiler reached by its dotted name, imported, or imported from (:data:`RUNTIME_COMPILERS`)."""
    found: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            names = [_dotted(n)]
        elif isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module:
            names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
        else:
            continue
        found.update(name for name in names if RUNTIME_COMPILERS.match(name))
    if found:
        report.strict.append(f"{COMPILES} ({', '.join(sorted(found))})")


def _check_escapes(report: StaticReport, tree: ast.Module, reference: str | None) -> None:
    """No code run from a string, no files, no exit of the process, no reading its arguments or stdin, no ctypes.

    One exception: a compiler seed's ``exec(compile(NAME, ...))`` of a module-level string that is the task's
    own source (it rebuilds the reference's parameters).
    """
    own = {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value == reference
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def of_the_task(call: ast.Call) -> bool:
        arg = call.args[0] if call.args else None
        if isinstance(arg, ast.Call) and _dotted(arg.func) == "compile":
            arg = arg.args[0] if arg.args else None
        return reference is not None and isinstance(arg, ast.Name) and arg.id in own

    found: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = _dotted(n.func)
            if name in ("exec", "eval", "compile") and not of_the_task(n):
                found.append(f"calls {name} (line {n.lineno})")
            elif ESCAPE_CALLS.match(name):
                found.append(f"calls {name} (line {n.lineno})")
        elif isinstance(n, ast.Attribute) and n.attr in ("argv", "stdin", "orig_argv") and _dotted(n.value) == "sys":
            found.append(f"uses sys.{n.attr}")
        elif isinstance(n, ast.Import):
            found += [f"imports {a.name}" for a in n.names if a.name.split(".")[0] in ("ctypes", "mmap")]
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("ctypes", "mmap"):
            found += [f"imports {a.name} from {n.module}" for a in n.names if not re.fullmatch(r"c_\w+", a.name)]
    for what in dict.fromkeys(found):
        report.strict.append(f"{what}: {ESCAPES}")


def _check_introspection(report: StaticReport, tree: ast.Module) -> None:
    """No looking around the reviewer's process (frames, the garbage collector, ``sys.modules``, its package).

    Nor an array library beside the kernels (SciPy, JAX, CuPy and the like), nor tensor data moved to NumPy,
    nor PyTorch's probes and switches of the instruments the reviewer records with (:data:`INSTRUMENT_NAMES`).
    """
    found: list[str] = []
    instruments: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            found += [
                f"imports {m}" for m in names if m.split(".")[0] in INTROSPECTION_MODULES or m in INTROSPECTION_MODULES
            ]
            report.strict += [f"imports {m}: {HOST_WORK}" for m in names if m.split(".")[0] in HOST_ARRAY_MODULES]
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "numpy" and not n.args:
            report.strict.append(f"calls .numpy() (line {n.lineno}): {HOST_WORK}")
        elif isinstance(n, ast.Attribute) and n.attr in INTROSPECTION_ATTRS:
            found.append(f"uses .{n.attr}")
        elif isinstance(n, ast.Attribute) and n.attr == "modules" and _dotted(n.value) == "sys":
            found.append("uses sys.modules")
        elif isinstance(n, ast.Name) and n.id in INTROSPECTION_NAMES:
            found.append(f"uses {n.id}")
        instrument = _instrument_name(n)
        if instrument:
            instruments.append(f"uses {instrument}")
    for what in dict.fromkeys(found):  # once each, in order
        report.strict.append(f"{what}: {INTROSPECTS}")
    report.strict += [f"{what}: {INSTRUMENTS}" for what in dict.fromkeys(instruments)]


def _instrument_name(n: ast.AST) -> str:
    """The :data:`INSTRUMENT_NAMES` entry ``n`` names (as a name, an attribute, an import or a string), or ""."""
    if isinstance(n, ast.Name):
        name = n.id
    elif isinstance(n, ast.Attribute):
        name = n.attr
    elif isinstance(n, ast.alias):
        name = n.name.rsplit(".", 1)[-1]
    elif isinstance(n, ast.Constant) and isinstance(n.value, str):
        name = n.value.strip()
    else:
        return ""
    return name if name in INSTRUMENT_NAMES else ""


def _check_forward(report: StaticReport, tree: ast.Module) -> None:
    """``ModelNew``'s forward (its own or inherited): no try/except fallback; PyTorch main work is labelled."""
    fns, subs = _forwards(tree, "ModelNew")
    for fn in fns:
        for n in ast.walk(fn):
            if isinstance(n, ast.Try):
                report.strict.append(f"try/except in forward (line {n.lineno}): a fallback would hide kernel failures")
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                report.warnings.append(f"PyTorch matmul (@) in forward, line {n.lineno}")
                _label(report, "torch_main_work")
            if not isinstance(n, ast.Call):
                continue
            name = _dotted(n.func)
            root, _, tail = name.rpartition(".")
            if root == "self" and tail in subs and subs[tail].startswith(HEAVY_MODULES):
                report.warnings.append(f"nn.{subs[tail]} submodule self.{tail} called in forward, line {n.lineno}")
                _label(report, "torch_main_work")
            elif tail in HEAVY_OPS and root and not root.startswith(_OWN_ROOTS):
                report.warnings.append(f"PyTorch {name} in forward, line {n.lineno}")
                _label(report, "torch_main_work")
            elif tail in LIGHT_OPS and root in ("torch", "F", "torch.nn.functional"):
                report.warnings.append(f"PyTorch {name} in forward, line {n.lineno}")


def _capture_regions(tree: ast.Module) -> list[ast.AST]:
    """Code a CUDA graph captures, and, transitively, the module's functions and methods it calls or passes on.

    ``with torch.cuda.graph(...)`` bodies, a function that calls ``capture_begin``, and what
    ``make_graphed_callables`` is given.
    """
    functions: dict[str, list[ast.FunctionDef]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and not any("jit" in _dotted(d) for d in n.decorator_list):
            functions.setdefault(n.name, []).append(n)
    regions: list[ast.AST] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.With) and any(
            _dotted(item.context_expr).rpartition(".")[2] == "graph" for item in n.items
        ):  # torch.cuda.graph(g), cuda.graph(g), graph(g)
            regions += n.body
        elif isinstance(n, ast.FunctionDef) and any(
            isinstance(c, ast.Call) and _dotted(c.func).endswith("capture_begin") for c in ast.walk(n)
        ):
            regions.append(n)
        elif isinstance(n, ast.Call) and _dotted(n.func).endswith("make_graphed_callables") and n.args:
            regions.append(n.args[0])
    seen: set[int] = set()
    todo, out = list(regions), []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for c in ast.walk(node):  # f(...), self.f(...), super().f(...), self(...), f or self.f passed on
            name = _dotted(c) if isinstance(c, (ast.Name, ast.Attribute)) else ""
            root, _, tail = name.rpartition(".")
            if tail and root in ("", "self", "super", "cls"):
                todo += functions.get("forward" if tail == "self" else tail, [])
    return out


def _check_graph_capture(report: StaticReport, tree: ast.Module) -> None:
    """A heavy PyTorch op a CUDA graph captures is main work in PyTorch, wherever the capture happens.

    A graph's replay dispatches no op, so a graph captured outside the forward the reviewer records (in
    ``__init__``, say) and replayed in it would hide a cuBLAS / cuDNN call from the record of what ran.
    """
    if NOT_CUSTOM_LABELS & set(report.labels):
        return
    subs: dict[str, str] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        subs.update(_submodule_types(cls))
    for region in _capture_regions(tree):
        for n in ast.walk(region):
            what = ""
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                what = "matmul (@)"
            elif isinstance(n, (ast.Call, ast.Attribute)):
                name = _dotted(n.func) if isinstance(n, ast.Call) else _dotted(n)
                root, _, tail = name.rpartition(".")
                if root == "self" and subs.get(tail, "").startswith(HEAVY_MODULES):
                    what = f"nn.{subs[tail]} submodule self.{tail}"
                elif isinstance(n, ast.Call) and tail in HEAVY_OPS and root and not root.startswith(_OWN_ROOTS):
                    what = name
            if what:
                line = getattr(n, "lineno", "?")
                report.warnings.append(f"PyTorch {what} captured in a CUDA graph (line {line}): its replays run it")
                _label(report, "torch_main_work")
                return


_CONV = re.compile(r"\bConv(?:Transpose)?[123]d\b|\bconv(?:_transpose)?[123]d\s*\(")
_GEMM = re.compile(
    r"\b(?:Linear|Bilinear|MultiheadAttention|Transformer\w*|LSTM\w*|GRU\w*|RNN\w*)\b"
    r"|\b(?:matmul|mm|bmm|addmm|baddbmm|einsum|linear|scaled_dot_product_attention|tensordot)\s*\("
)


def tf32_allowed(precision: str, reference: str) -> bool:
    """Whether a candidate may multiply fp32 tiles in single-pass TF32 under the precision policy.

    ``tf32``: everywhere. ``fp32``: only where the reference itself does under PyTorch's defaults:
    cuDNN convolutions run TF32 (``torch.backends.cudnn.allow_tf32`` is True), matmuls do not. So
    only a reference with convolutions and no GEMM-like op (linear, matmul, attention, RNN...).
    """
    if precision == "tf32":
        return True
    try:
        matmul_op = any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) for n in ast.walk(ast.parse(reference))
        )
    except SyntaxError:
        return False
    return bool(_CONV.search(reference)) and not _GEMM.search(reference) and not matmul_op


def label_tf32(report: StaticReport) -> None:
    """Label (and warn about) a candidate whose ``tl.dot`` multiplies fp32 tiles in TF32."""
    if "tf32_dot" not in report.labels:
        report.warnings.append("tl.dot multiplies fp32 tiles in TF32 (10-bit mantissa products)")
        _label(report, "tf32_dot")


def _label(report: StaticReport, label: str) -> None:
    if label not in report.labels:
        report.labels.append(label)
