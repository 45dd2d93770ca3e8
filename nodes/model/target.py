"""What the prompts say about where the code runs: the target device, the shapes, the profile.

The facts come from the task's probe (``runner/worker.py``: the reference run once on the review
device, with its input / output shapes and the device's properties) and from reviews; the peak
rates of known GPUs come from their datasheets (dense, no sparsity). Nothing here calls a device.
"""

from __future__ import annotations

from typing import Any

from kernelskill.runner.static_check import tf32_allowed

# Datasheet peaks of known GPUs, by a substring of the name torch reports: HBM TB/s, then dense
# TFLOP/s for fp32 (CUDA cores), tf32, and bf16 / fp16 (tensor cores).
GPU_PEAKS: dict[str, dict[str, float]] = {
    "H200": {"hbm_tbs": 4.8, "fp32": 67.0, "tf32": 495.0, "bf16": 989.0},
    "H100": {"hbm_tbs": 3.35, "fp32": 67.0, "tf32": 495.0, "bf16": 989.0},
    "A100": {"hbm_tbs": 2.04, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
    "L40S": {"hbm_tbs": 0.864, "fp32": 91.6, "tf32": 183.0, "bf16": 362.0},
}

INTERPRETER = (
    "The review runs on the CPU with Triton's interpreter (TRITON_INTERPRET=1): every tensor is a CPU "
    "tensor, at the reduced sizes below, and every kernel the forward launches is also compiled for sm_90 "
    "(Hopper) to catch compile errors. So: no `assert x.is_cuda` and no CUDA-only APIs (streams, events, "
    "`torch.cuda.*`); CUDA C++ through load_inline cannot build here; give `@triton.autotune` at most one "
    "config. Timings here are not performance signals: the first correct candidate stays the best."
)
OUTPUT_FORMAT = (
    "Kernels: Triton (`@triton.jit`); CUDA C++ through `torch.utils.cpp_extension.load_inline` is also "
    "accepted on a GPU machine with a CUDA toolchain."
)


def peaks_for(name: str) -> dict[str, float] | None:
    """Datasheet peaks of a GPU by its reported name, or None when unknown."""
    return next((p for key, p in GPU_PEAKS.items() if key in name), None)


def target_text(probe: dict[str, Any] | None) -> str:
    """The target device for the prompts: the interpreter on a CPU, the GPU's specifications on CUDA."""
    device = (probe or {}).get("device") or {}
    name = str(device.get("name", ""))
    if not name or name.startswith("cpu"):
        return f"{INTERPRETER}\n{OUTPUT_FORMAT.split(';')[0]}."
    parts = [f"Target GPU: {name}"]
    if "capability" in device:
        parts.append(
            f"compute capability {device['capability']}, {device.get('sms', '?')} SMs, "
            f"{device.get('memory_gib', '?')} GiB"
        )
    if device.get("shared_memory_per_block_optin"):
        parts.append(f"shared memory up to {device['shared_memory_per_block_optin'] // 1024} KiB per block")
    if device.get("regs_per_multiprocessor"):
        parts.append(f"{device['regs_per_multiprocessor']} registers per SM")
    if device.get("L2_cache_size"):
        parts.append(f"L2 {device['L2_cache_size'] / 2**20:.0f} MiB")
    lines = ["; ".join(parts) + "."]
    peaks = peaks_for(name)
    if peaks:
        lines.append(
            f"Peaks (datasheet, dense): HBM {peaks['hbm_tbs']:g} TB/s; fp32 {peaks['fp32']:g} TFLOP/s, "
            f"tf32 {peaks['tf32']:g}, bf16 / fp16 {peaks['bf16']:g}."
        )
    lines.append(OUTPUT_FORMAT)
    return "\n".join(lines)


def _tensors(items: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{t['dtype']} [{', '.join(map(str, t['shape']))}]" if "shape" in t else str(t.get("value")) for t in items
    )


def io_text(probe: dict[str, Any] | None) -> str:
    """The shapes and dtypes of ``forward``'s inputs and outputs as the review runs them."""
    if not probe or "inputs" not in probe:
        return "(not known: the task was not probed)"
    return f"forward inputs: {_tensors(probe['inputs'])}; outputs: {_tensors(probe.get('outputs', []))}"


def profile_text(review: dict[str, Any]) -> str:
    """The review's performance numbers for a prompt (GPU timings only; on the CPU, says there are none)."""
    if review.get("timing_kind") != "cuda_events":
        return "CPU interpreter run: correctness only, no performance signal"
    parts = [f"{review['runtime_ms']:.4f} ms on GPU", f"{review.get('speedup_vs_eager') or 0:.2f}x vs eager"]
    if review.get("speedup_vs_compile"):
        parts.append(f"{review['speedup_vs_compile']:.2f}x vs torch.compile")
    metrics = review.get("metrics") or {}
    shown = {
        k: v for k, v in sorted(metrics.items()) if k not in ("runtime_ms", "speedup_vs_eager", "speedup_vs_compile")
    }
    if shown:
        parts.append(
            "profile: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items())
        )
    return "; ".join(parts)


def precision_text(precision: str, reference: str) -> str:
    """The precision policy as the prompts state it (the reviewer enforces the same rule)."""
    if tf32_allowed(precision, reference):
        text = (
            f"Precision policy {precision}: single-pass TF32 tensor-core products (Triton's default for fp32 "
            "tl.dot) are allowed for this task."
        )
        if precision == "tf32":  # runner/env.py: policy_numerics
            text += (
                " Your module runs with PyTorch's TF32 matmuls already allowed, as eager and torch.compile are "
                "timed; never set torch.backends flags yourself (the reviewer rejects it)."
            )
        return text
    return (
        f"Precision policy {precision}: every fp32 product must be fp32-accurate: tl.dot(..., "
        'input_precision="ieee") or "tf32x3"; single-pass TF32 (the default for fp32 tl.dot) is rejected.'
    )


def where_text(precision: str, task: dict[str, Any]) -> str:
    """The prompts' "Where it runs" section: the target device and the precision policy."""
    return f"{target_text(task.get('probe'))}\n{precision_text(precision, task.get('source', ''))}"
