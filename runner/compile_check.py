"""Catch real-compile errors without a GPU.

Triton's CPU interpreter executes kernels as NumPy code, so it accepts programs a real compile
rejects (``tl.dot`` on tiles smaller than 16, unsupported layouts, ...). While a candidate runs
under the interpreter, :class:`LaunchRecorder` records every kernel launch (the Python function,
argument types and constexpr values); :func:`compile_recorded` then compiles each distinct
specialization with ``triton.compile(..., target=GPUTarget("cuda", 90, 32))`` for Hopper, which
needs no GPU. Imports only triton and torch.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

_DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
}


@dataclass
class Launch:
    """One recorded kernel specialization."""

    fn: Any  # the undecorated Python function
    name: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple:
        """Identity of the specialization (deduplication)."""
        return (
            self.name,
            tuple(sorted(self.signature.items())),
            tuple(sorted((k, repr(v)) for k, v in self.constexprs.items())),
            tuple(sorted(self.options.items())),
        )


def sm90_driver() -> None:
    """Make Triton's active driver a stand-in for an sm_90 GPU's, as far as a compile needs one: no GPU.

    Then ``JITFunction.warmup`` (and Triton's ``AsyncCompileMode``) compile for sm_90 on a machine without
    one; nothing can be launched. For measuring compiles (``bench_conv --compile-time``) and their tests.
    """
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    class Hopper:
        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_current_target(self) -> Any:
            return GPUTarget("cuda", 90, 32)

    driver.set_active(Hopper())


def arg_type(value: Any) -> str:
    """A launch argument's type in a Triton signature (a tensor: its pointer type, e.g. ``*fp32``)."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return "*" + _DTYPES.get(str(value.dtype).replace("torch.", ""), "fp32")
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return "constexpr"


class LaunchRecorder:
    """Context manager recording interpreter launches of ``@triton.jit`` kernels."""

    def __init__(self, limit: int = 16) -> None:
        self.launches: dict[tuple, Launch] = {}
        self.limit = limit
        self._orig: Any = None

    def __enter__(self) -> LaunchRecorder:
        from triton.runtime.interpreter import InterpretedFunction

        orig = InterpretedFunction.run
        recorder = self

        def run(self_fn: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                recorder._record(self_fn, args, kwargs)
            except Exception:  # recording must never change the candidate's behaviour
                pass
            return orig(self_fn, *args, **kwargs)

        self._orig = orig
        InterpretedFunction.run = run
        return self

    def __exit__(self, *exc: Any) -> None:
        from triton.runtime.interpreter import InterpretedFunction

        InterpretedFunction.run = self._orig

    def _record(self, interp: Any, args: tuple, kwargs: dict) -> None:
        if len(self.launches) >= self.limit:
            return
        fn = interp.fn
        params = list(inspect.signature(fn).parameters.values())
        options = {k: kwargs[k] for k in ("num_warps", "num_stages", "num_ctas") if k in kwargs}
        bound: dict[str, Any] = {}
        for p, a in zip(params, args, strict=False):
            bound[p.name] = a
        for p in params[len(args) :]:
            if p.name in kwargs:
                bound[p.name] = kwargs[p.name]
            elif p.default is not inspect.Parameter.empty:
                bound[p.name] = p.default
        signature: dict[str, str] = {}
        constexprs: dict[str, Any] = {}
        for p in params:
            value = bound.get(p.name)
            is_constexpr = "constexpr" in str(p.annotation)
            if is_constexpr or value is None:
                signature[p.name] = "constexpr"
                constexprs[p.name] = value
            else:
                signature[p.name] = arg_type(value)
        launch = Launch(fn, fn.__name__, signature, constexprs, options)
        self.launches.setdefault(launch.key(), launch)


def _unwrap_jit(obj: Any) -> Any:
    from triton.runtime.jit import JITFunction

    for _ in range(5):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def compile_launches(launches: list[dict[str, Any]], arch: int = 90) -> list[dict[str, str]]:
    """Compile serialized launches for ``sm_<arch>``; one {kernel, error} per failure.

    Must run in a process where ``TRITON_INTERPRET`` is unset: the interpreter patches
    ``triton.language`` in ways that break later real compiles in the same process.
    """
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    errors: list[dict[str, str]] = []
    modules: dict[str, Any] = {}
    for launch in launches:
        path = launch["file"]
        if path not in modules:
            spec = importlib.util.spec_from_file_location("kernelskill_compile_check", path)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            modules[path] = module
        jit = _unwrap_jit(getattr(modules[path], launch["name"], None))
        if jit is None:
            continue  # a kernel defined inside a function: not reachable by name, skip
        names = list(jit.arg_names)
        constexprs = {(names.index(k),): v for k, v in launch["constexprs"].items()}
        try:
            src = ASTSource(jit, signature=launch["signature"], constexprs=constexprs)
            triton.compile(src, target=GPUTarget("cuda", arch, 32), options=launch["options"])
        except Exception as e:  # any compiler failure is the candidate's compile error
            text = str(e).strip()
            errors.append({"kernel": launch["name"], "error": f"{type(e).__name__}: {text[-1500:]}"})
    return errors


def compile_as_launched(
    fn: Any, values: dict[str, Any], constexprs: dict[str, Any], options: dict[str, Any], arch: int = 90
) -> Any:
    """``fn`` (a ``@triton.jit`` function) compiled for ``sm_<arch>`` as a launch with ``values`` would be.

    ``values``: every non-constexpr argument: a pointer as its type (``"*fp32"``; taken as 16-byte aligned,
    as a fresh PyTorch allocation is), an int or a float. Ints are specialized as Triton's launcher does
    (1 becomes a constexpr, a multiple of 16 is marked divisible by 16), which decides the vector width of
    loads and stores: a compile with plain ``i32`` arguments misses it. Needs no GPU; not under the interpreter.
    """
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource

    jit = _unwrap_jit(fn)
    signature, attrs, consts = {}, {}, dict(constexprs)
    for i, name in enumerate(jit.arg_names):
        if name in consts:
            signature[name] = "constexpr"
            continue
        value = values[name]
        if isinstance(value, str):  # a pointer
            signature[name], attrs[(i,)] = value, [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            kind, attr = native_specialize_impl(CUDABackend, value, False, True, True)
            if kind == "constexpr":
                signature[name], consts[name] = "constexpr", attr
            else:
                signature[name] = kind
                if attr == "D":
                    attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(jit, signature=signature, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def resource_usage(compiled: Any, arch: int = 90) -> dict[str, int]:
    """What a :func:`compile_as_launched` kernel uses: registers, spills, shared memory, matrix instructions.

    Registers per thread and bytes spilled to local memory from ptxas -v; how many ``wgmma`` / ``mma.sync``
    instructions its PTX holds.
    """
    import os
    import re
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "kernel.ptx")
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        gpu = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
        cmd = [get_ptxas(arch).path, "-v", f"--gpu-name={gpu}", ptx, "-o", os.path.join(tmp, "kernel.cubin")]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr

    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    return {
        "registers": number(r"Used (\d+) registers"),
        "spill_stores": number(r"(\d+) bytes spill stores"),
        "spill_loads": number(r"(\d+) bytes spill loads"),
        "shared": int(compiled.metadata.shared),
        # the matrix products: Hopper's asynchronous warpgroup MMA, or Ampere's synchronous one (0 and 0: FMAs)
        "wgmma": len(re.findall(r"\bwgmma\.mma_async\b", compiled.asm["ptx"])),
        "mma_sync": len(re.findall(r"\bmma\.sync\b", compiled.asm["ptx"])),
    }


def serialize(launches: list[Launch]) -> list[dict[str, Any]]:
    """JSON-ready launches; specializations with non-literal constexprs are left out."""
    out = []
    for launch in launches:
        ok = all(isinstance(v, (int, float, bool, str, type(None))) for v in launch.constexprs.values())
        file = getattr(launch.fn, "__code__", None)
        if ok and file is not None:
            out.append(
                {
                    "file": file.co_filename,
                    "name": launch.name,
                    "signature": launch.signature,
                    "constexprs": launch.constexprs,
                    "options": launch.options,
                }
            )
    return out


def check_in_subprocess(launches: list[Launch], timeout_s: float = 240.0) -> list[dict[str, str]]:
    """Run :func:`compile_launches` in a fresh interpreter without ``TRITON_INTERPRET``."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    payload = serialize(launches)
    if not payload:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        req, res = os.path.join(tmp, "launches.json"), os.path.join(tmp, "errors.json")
        with open(req, "w") as f:
            json.dump(payload, f)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        proc = subprocess.run(
            [sys.executable, "-m", "kernelskill.runner.compile_check", req, res],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if proc.returncode != 0 or not os.path.exists(res):
            tail = (proc.stderr or proc.stdout)[-1500:]
            return [{"kernel": "(module)", "error": f"compile check process failed: {tail}"}]
        with open(res) as f:
            return list(json.load(f))


if __name__ == "__main__":
    import json
    import os
    import sys

    from .audit import install

    with open(sys.argv[1]) as f:
        launches = json.load(f)
    install(*{os.path.dirname(os.path.realpath(launch["file"])) for launch in launches})  # imported here too
    with open(sys.argv[2], "w") as f:
        json.dump(compile_launches(launches), f)
