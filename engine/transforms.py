"""Deterministic skills: source transforms the optimizer applies without a model (offline engine).

Each transform implements the method of the skill cards that name it (``transform:`` in the card):

- ``cuda_graph`` (card ``cuda-graphs``): the candidate's ``ModelNew`` is subclassed; the subclass
  captures the forward once per input signature in a CUDA graph (after two warm-up calls that
  compile, autotune and allocate) and replays it, copying new inputs into the static input buffers
  and returning clones of the static outputs (so a later call never overwrites a returned tensor).
- ``autotune_sweep`` (cards ``autotune-configs``, ``block-size-num-warps``): for a compiler seed,
  TorchInductor's own sweep (max-autotune over GEMM/convolution templates plus coordinate-descent
  tuning of every kernel's block sizes, ``num_warps`` and ``num_stages``), captured as a new seed
  (under ``kernels = custom`` with the Triton templates only: a library GEMM's answer would not count);
  a compiler seed whose dots were moved to ``tf32x3`` / ``tf32`` / ``tf32r`` is recaptured with TF32 matmuls
  allowed (Inductor then autotunes its templates for tensor-core products) and given its
  precision back; for a hand-written candidate, one-knob-at-a-time neighbours of each launch's constexpr tile sizes
  and ``num_warps`` / ``num_stages`` (``engine/sweep.py``), every variant reviewed.
- ``conv_gemm`` (card ``conv-im2col-gemm``): a compiler seed with a Triton convolution template
  kernel recaptured with its 2-D convolutions as im2col + GEMM (``engine/reformulate.py``), so that
  Inductor's matmul template does their math; the parent's dot precision is kept as for
  ``autotune_sweep`` (with ``Context.split_gemm``, a ``tf32x3`` parent also gets the GEMMs over 3xTF32
  split operands, as ``dot_precision`` makes them, where the precision policy allows single-pass TF32
  dots), and a later ``autotune_sweep`` keeps the form.
- ``dot_precision`` (card ``dot-input-precision``): every fp32 ``tl.dot`` kept off tensor cores
  (``input_precision="ieee"`` / ``allow_tf32=False``) rewritten to ``"tf32x3"`` and, as further
  variants, ``"tf32"`` and ``"tf32"`` of operands rounded to nearest (``tf32r``; ``engine/precision.py``);
  with ``Context.split_gemm`` (off by default), for a compiler seed whose dots are all GEMM templates,
  also a recapture with each fp32 GEMM as one TF32 GEMM over 3xTF32 split operands
  (``engine/reformulate.py``), where the precision policy allows a single-pass TF32 dot (the reviewer
  cannot tell split operands from plain ones, so under ``fp32`` with fp32 matmuls it is not tried); the
  reviewer keeps the fastest one that is correct. On an H200 the split
  GEMMs missed the fp32 tolerance on level 1's 4096^3 matmuls and on attention (likely because every
  product goes into the running sum inside the tensor-core instruction, where Triton's ``tf32x3`` adds
  each tile's products to it in fp32) and, where correct, were never the fastest candidate
  (docs/benchmarks.md, "split GEMM").
- ``flash_attention`` (card ``flash-attention``): a compiler seed whose graph has attention the fused kernel
  can take (header mark ``ATTENTION_MARK``: ``scaled_dot_product_attention`` or ``nn.MultiheadAttention``
  without masks, dropout or returned weights) recaptured with each such call as one fused Triton kernel
  (``engine/flash_attention.py``), proposed with exact fp32 products and the three ``dot_precision``
  variants; the parent's own ``dot_precision`` variants come too, so that the round is never worse than
  the ``dot_precision`` round the policy's rule ``attention-unfused`` puts it ahead of. A later recapture
  keeps the fused form.
- ``conv_kernel`` (card ``implicit-gemm-conv``): a compiler seed with a convolution (a cuDNN call or a Triton
  template) recaptured with every convolution in our implicit-GEMM kernel (``engine/conv.py``; transposed ones by
  phase decomposition, depthwise ones in fp32 multiply-adds), two captures: products in ``tf32r`` (TF32 rounded to
  nearest, as cuDNN's TF32 convolutions, which PyTorch's defaults allow under either precision policy, also in a
  task whose GEMMs must stay fp32: the rule is per product, and only the convolutions move) and in ``tf32x3`` (side
  by side where the run's GPU is shared, as in an eval: its timings then take turns alone; one after the other
  otherwise, so that neither's tuning is timed beside the other's). The reviewer allows a convolution the error of
  the reference with TF32 convolutions, even where cuDNN ran the reference's exact; where it cannot run that, only
  the near-fp32 capture stays correct. The element-wise tail of each convolution in the graph is computed in the
  kernel before its store (``reformulate.conv_kernel_forms``), and so are a step over the output channels after it
  (min, max, sum, mean, logsumexp, softmax), a max or average pooling whose window is its stride, and a mean over
  every spatial dimension, each with the element-wise steps after it; a batch, group or instance norm after the tail
  takes its statistics from sums the kernel adds up as it stores; Inductor fuses the rest into its own kernels. A
  later recapture keeps the form. Under ``kernels = custom`` a ``default`` (``autotune``) seed that leaves GEMMs to
  cuBLAS is recaptured as ``triton`` (``triton_autotune``), its GEMMs in Triton's templates: a cuBLAS GEMM beside our
  convolutions (a network's classifier) would keep the candidate a library's (``library_main_work``).

The reviewer judges every result like any other candidate; a transform only proposes.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kernelskill.engine.inductor_seed import (
    ATTENTION_MARK,
    CONV_GEMM_MARK,
    CONV_KERNEL_MARK,
    FLASH_MARK,
    SPLIT_GEMM_MARK,
    TUNED,
    heavy_extern_calls,
)
from kernelskill.graph import deadline
from kernelskill.graph.context import Context
from kernelskill.runner import gpu_share
from kernelskill.runner.dot_precision import applied_precision, count_exact_dots
from kernelskill.runner.static_check import LIBRARY_GEMMS, tf32_allowed

from .compiler import capture_variant, is_compiler_seed
from .precision import precision_variants
from .sweep import sweep_variants, sweepable_launches

# Every transform this module applies (a card names one in ``transform:``; without long-term memory the
# offline planner draws among those that apply, with no card read).
TRANSFORMS = ("autotune_sweep", "conv_gemm", "conv_kernel", "cuda_graph", "dot_precision", "flash_attention")
GRAPH_MARK = "# ---- kernelskill transform: cuda_graph"
CONV_TEMPLATE = re.compile(r"def triton_tem_fused_\w*convolution")  # Inductor's convolution template kernels
SWEEP_VARIANTS = 4
# under kernels = custom, the capture of a seed's variant with its GEMMs in Triton's templates, not cuBLAS
TRITON_GEMMS = {"default": "triton", "autotune": "triton_autotune"}

CUDA_GRAPH_WRAPPER = '''

GRAPH_MARK ------------------------------------------------------------------
_KsEagerModelNew = ModelNew


def _ks_clone(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_ks_clone(o) for o in out)
    return out


class ModelNew(_KsEagerModelNew):
    """The candidate's forward, captured in a CUDA graph per input signature and replayed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ks_graphs = {}

    def _ks_capture(self, inputs):
        static_in = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        for _ in range(2):  # compile, autotune and allocate before the capture
            super().forward(*static_in)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = super().forward(*static_in)
        return graph, static_in, static_out

    def forward(self, *inputs):
        key = tuple(
            (tuple(x.shape), x.stride(), x.dtype, x.device) if isinstance(x, torch.Tensor) else repr(x) for x in inputs
        )
        entry = self._ks_graphs.get(key)
        if entry is None:
            entry = self._ks_graphs[key] = self._ks_capture(inputs)
        graph, static_in, static_out = entry
        for dst, src in zip(static_in, inputs):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        graph.replay()
        return _ks_clone(static_out)
'''.replace("GRAPH_MARK", GRAPH_MARK)


def cuda_graph_wrap(source: str) -> str:
    """``source`` with its ``ModelNew`` replayed from a CUDA graph (idempotent)."""
    if GRAPH_MARK in source:
        return source
    head = source if "import torch\n" in source else "import torch\n" + source
    return head.rstrip() + "\n" + CUDA_GRAPH_WRAPPER


def unwrap_cuda_graph(source: str) -> str:
    """``source`` without the CUDA-graph wrapper."""
    i = source.find("\n\n" + GRAPH_MARK)
    return source if i < 0 else source[:i].rstrip() + "\n"


def applicable(transform: str, source: str) -> str | None:
    """None when ``transform`` can be applied to ``source``, else why not."""
    if not source:
        return "no source"
    if transform == "cuda_graph":
        return "already replayed from a CUDA graph" if GRAPH_MARK in source else None
    if transform == "autotune_sweep":
        variant = is_compiler_seed(source)
        if variant is not None:
            return None if variant in TUNED else "already TorchInductor's autotuned variant"
        if any(launch.knobs and not launch.skip_reason for launch in sweepable_launches(unwrap_cuda_graph(source))):
            return None
        return "no launch with literal constexpr tile sizes or num_warps to sweep"
    if transform == "dot_precision":
        return None if count_exact_dots(source) else "no fp32 tl.dot kept off tensor cores (ieee / allow_tf32=False)"
    if transform in _SEED_FORMS:  # a compiler seed recaptured in another form
        done_mark, done, wanted, unwanted = _SEED_FORMS[transform]
        base = unwrap_cuda_graph(source)
        if is_compiler_seed(base) is None:
            return "not a compiler seed"
        if _captured_with(base, done_mark):
            return done
        return None if wanted(base) else unwanted
    return f"no deterministic transform named {transform!r}"


# transform -> (its seed-header mark, why not again, does the seed need it, why not)
_SEED_FORMS = {
    "conv_gemm": (
        CONV_GEMM_MARK,
        "convolutions already captured as im2col GEMMs",
        lambda base: bool(CONV_TEMPLATE.search(base)),
        "no Triton convolution template kernel",
    ),
    "conv_kernel": (
        CONV_KERNEL_MARK,
        "convolutions already in our kernel",
        lambda base: "extern_kernels.convolution(" in base or bool(CONV_TEMPLATE.search(base)),
        "no convolution (cuDNN call or Triton template) in the seed",
    ),
    "flash_attention": (
        FLASH_MARK,
        "attention already captured as a fused kernel",
        lambda base: _captured_with(base, ATTENTION_MARK),
        "no attention call the fused kernel can take",
    ),
}


def split_gemm_applicable(base: str, tf32_ok: bool = True) -> str | None:
    """None when a compiler seed can be recaptured with its GEMMs over 3xTF32 split operands, else why not.

    A Triton convolution template would run in TF32 in such a capture (TF32 is allowed globally), so a
    seed with one is left to ``conv_gemm`` first. The split GEMM is one single-pass TF32 ``tl.dot``: where
    the precision policy allows no such dot (``tf32_ok`` false: ``fp32`` with fp32 matmuls in the
    reference), the reviewer rejects it whatever its operands, so it is not tried.
    """
    if not tf32_ok:
        return "precision fp32: the reviewer rejects a single-pass TF32 dot, over split operands too"
    if _captured_with(base, SPLIT_GEMM_MARK):
        return "GEMMs already over 3xTF32 split operands"
    if CONV_TEMPLATE.search(base):
        return "a Triton convolution template kernel would run in TF32"
    return None if count_exact_dots(base) else "no fp32 tl.dot kept off tensor cores"


def _captured_with(source: str, mark: str) -> bool:
    """True for a compiler seed whose header names ``mark`` (``CONV_GEMM_MARK``, ``SPLIT_GEMM_MARK``)."""
    return mark in source[:2000]


def apply(transform: str, source: str, ctx: Context, task_path: str, workdir: Path) -> tuple[list[str], list[str], str]:
    """Apply ``transform`` to ``source``: (new sources, one note per source, problem or '')."""
    why = applicable(transform, source)
    if why:
        return [], [], f"{transform} not applicable: {why}"
    if transform == "cuda_graph":
        return [cuda_graph_wrap(source)], ["cuda_graph: forward captured in a CUDA graph and replayed"], ""
    graphed = GRAPH_MARK in source
    base = unwrap_cuda_graph(source)
    variant = is_compiler_seed(base)
    conv_gemm_form = _captured_with(base, CONV_GEMM_MARK)
    if transform == "flash_attention" and variant is not None:
        sources, notes, problem = _recapture(
            ctx, task_path, workdir, base, variant, conv_gemm_form, graphed, "flash_attention", flash=True
        )
        if sources and count_exact_dots(sources[0]):  # the fused kernel's products, as dot_precision varies them
            more = precision_variants(sources[0], _tf32_ok(ctx, task_path))
            sources, notes = sources + [v for v, _ in more], notes + [f"{notes[0]}; {n}" for _, n in more]
        if count_exact_dots(source):  # and the parent's: the round is never worse than dot_precision's
            more = precision_variants(source, _tf32_ok(ctx, task_path))
            sources += [v for v, _ in more]
            notes += [f"flash_attention (the parent's dots, for comparison): {n}" for _, n in more]
            if problem:
                notes[0] += f"; no fused-attention recapture: {problem}"
        return sources, notes, problem if not sources else ""
    if transform == "dot_precision":
        variants = precision_variants(source, _tf32_ok(ctx, task_path))
        sources, notes = [v for v, _ in variants], [note for _, note in variants]
        if ctx.split_gemm and variant is not None and split_gemm_applicable(base, _tf32_ok(ctx, task_path)) is None:
            split, split_notes, problem = _recapture(
                ctx, task_path, workdir, base, variant, conv_gemm_form, graphed, "dot_precision", split=True
            )
            sources, notes = sources + split, notes + split_notes
            if problem:  # the text variants stand (applicable() guarantees at least one)
                notes[0] += f"; no 3xTF32 split-operand recapture: {problem}"
        return sources, notes, ""
    if transform == "conv_kernel" and variant is not None:
        if ctx.kernels == "custom" and variant in TRITON_GEMMS and library_gemms(base):
            # a cuBLAS GEMM left beside our convolutions keeps the candidate a library's: Triton's GEMM templates
            variant = TRITON_GEMMS[variant]
        args = (ctx, task_path, workdir, base, variant, False, graphed, "conv_kernel")
        # cuDNN's numerics, which every precision policy allows a convolution (per product, not per task: the GEMMs
        # of the same graph keep their seed's precision): the reviewer allows it the error of the reference with
        # TF32 convolutions (runner/correctness.py), except where it cannot run that (the CPU, low-memory mode, a
        # user's torch.backends.cudnn.allow_tf32 = False), where only near-fp32 products stay within the
        # reference's own error: both, the reviewer decides
        forms = ("tf32r", "tf32x3")
        if gpu_share.active():  # two child processes compiling at once; their GPU timings take turns alone
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = [pool.submit(_recapture, *args, conv_kernel=form) for form in forms]
                results = [f.result() for f in futures]
        else:
            results = [_recapture(*args, conv_kernel=form) for form in forms]
        (sources, notes, problem), (exact, exact_notes, exact_problem) = results
        return sources + exact, notes + exact_notes, "" if sources or exact else problem or exact_problem
    if transform == "conv_gemm" and variant is not None:
        sources, notes, problem = _recapture(ctx, task_path, workdir, base, variant, True, graphed, "conv_gemm")
        # near-fp32 on tensor cores, like tf32x3, where the policy allows the single-pass TF32 dot it is
        if ctx.split_gemm and applied_precision(base) == "tf32x3" and _tf32_ok(ctx, task_path):
            split, split_notes, _ = _recapture(ctx, task_path, workdir, base, variant, True, graphed, "conv_gemm", True)
            sources, notes = sources + split, notes + split_notes
        return sources, notes, problem if not sources else ""
    if variant is not None:
        tuned = TUNED["triton"] if ctx.kernels == "custom" else TUNED[variant]  # custom: no library GEMM choices
        return _recapture(ctx, task_path, workdir, base, tuned, conv_gemm_form, graphed, "autotune_sweep")
    variants = sweep_variants(base, max_variants=SWEEP_VARIANTS)
    if not variants:
        return [], [], "autotune_sweep: no variant to try"
    sources = [cuda_graph_wrap(v) if graphed else v for v, _ in variants]
    return sources, [f"autotune_sweep: {note}" for _, note in variants], ""


def library_gemms(source: str) -> list[str]:
    """The GEMMs a compiler seed leaves to cuBLAS (``extern_kernels.mm`` / ``addmm`` / ``bmm`` ...), by name."""
    return [c for c in heavy_extern_calls(source) if LIBRARY_GEMMS.match(c)]


def _tf32_ok(ctx: Context, task_path: str) -> bool:
    """Single-pass TF32 variants are allowed for this task under the run's precision policy."""
    try:
        reference = Path(task_path).read_text()
    except OSError:
        reference = ""
    return tf32_allowed(ctx.precision, reference)


def _recapture(
    ctx: Context,
    task_path: str,
    workdir: Path,
    base: str,
    variant: str,
    conv_gemm: bool,
    graphed: bool,
    label: str,
    split: bool = False,
    flash: bool = False,
    conv_kernel: str | None = None,
) -> tuple[list[str], list[str], str]:
    """A compiler seed captured again as ``variant`` (``conv_gemm``: convolutions as im2col GEMMs).

    ``flash`` (or a parent captured so): attention calls as one fused Triton kernel each.

    A parent whose dots were moved to tensor cores is recaptured with TF32 allowed, so that Inductor's
    autotuning chooses its tiles for tensor-core products; the parent's precision is then written
    back into the fresh capture's dots. ``split`` (or a parent captured so): GEMMs over 3xTF32 split
    operands, whose TF32 dots are the method and stay as they are.
    """
    reserve = deadline.ROUND_RESERVE_S / 2  # the recapture's own review
    split = split or _captured_with(base, SPLIT_GEMM_MARK)
    flash = flash or _captured_with(base, FLASH_MARK)
    kept = re.search(re.escape(CONV_KERNEL_MARK) + r" \((\w+)\)", base[:2000])
    conv_kernel = conv_kernel or (kept.group(1) if kept else None)  # a later recapture keeps the form
    precision = None if split else applied_precision(base)
    tf32 = split or precision is not None
    # only when set; the child writes the parent's precision into the capture's dots before its self-check, which
    # so judges the candidate to be reviewed (a TF32 capture's single-pass dots would fail an fp32 reference's check)
    extra: dict[str, Any] = {k: v for k, v in (("conv_kernel", conv_kernel), ("precision", precision)) if v}
    outcome = capture_variant(ctx, task_path, variant, workdir, tf32, reserve, conv_gemm, split, flash, **extra)
    if not outcome.ok and precision:
        outcome = capture_variant(
            ctx, task_path, variant, workdir, reserve_s=reserve, conv_gemm=conv_gemm, flash=flash, **extra
        )
    if not outcome.ok:
        return [], [], outcome.note()
    new, note = outcome.source, f"{label}: {outcome.note()}"
    if precision:  # set by the capture child (precision=)
        note = f"{note}; dots kept at {precision}"
    return [cuda_graph_wrap(new) if graphed else new], [note], ""
