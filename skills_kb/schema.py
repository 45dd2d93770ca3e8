"""The skill-card schema, the vocabulary of features and metrics, and the predicate language.

A skill card is one YAML file in ``skills_kb/cards/``. Its applicability is written as predicates
over three namespaces: ``features.*`` (static code features, see :data:`FEATURES`), ``metrics.*``
(profile signals from the reviewer, see :data:`METRICS`) and ``derived.*`` (values the decision
policy computes from both, see :data:`DERIVED`; their formulas live in ``policy.yaml``). A
predicate is a string of the form ``NAMESPACE.NAME OP LITERAL``, for example
``"features.uses_dot == false"`` or ``"derived.limiter_pct < 60"``. OP is one of
``== != >= <= > <``; LITERAL is a number, ``true``, ``false`` or a bare word.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

Bottleneck = Literal[
    "memory_bandwidth",
    "gemm_tiling",
    "memory_latency",
    "compute",
    "register_pressure",
    "divergence",
    "launch_overhead",
    "code_structure",
]
BOTTLENECKS: tuple[str, ...] = Bottleneck.__args__  # type: ignore[attr-defined]

FEATURES: dict[str, str] = {
    "num_kernels": "number of @triton.jit kernels (or CUDA __global__ functions) in the candidate",
    "num_launch_sites": "number of kernel launch sites in the module's Python code",
    "uses_dot": "a kernel calls tl.dot (tensor cores)",
    "dot_fp32_exact": "a tl.dot over fp32 tiles stays off tensor cores (input_precision='ieee' or allow_tf32=False)",
    "has_reduction": "a kernel reduces (tl.sum / tl.max / tl.min / tl.reduce / tl.argmax ...)",
    "has_loops": "a kernel contains a loop (for/while), e.g. over K tiles",
    "is_pointwise": "kernels neither reduce nor call tl.dot",
    "uses_atomics": "a kernel uses tl.atomic_* operations",
    "has_masks": "loads/stores pass mask=",
    "uses_autotune": "a kernel is decorated with @triton.autotune",
    "uses_transcendentals": "a kernel calls exp/log/sin/cos/sqrt/tanh/sigmoid-like functions",
    "num_loads": "tl.load calls over all kernels",
    "num_stores": "tl.store calls over all kernels",
    "max_loads_per_kernel": "largest number of tl.load calls in one kernel",
    "max_block_size": "largest literal block size passed or declared (0 when unknown)",
    "num_constexpr_params": "tl.constexpr parameters over all kernels",
    "torch_ops_in_forward": "PyTorch compute calls (torch.* / F.* / tensor math) left in forward",
    "uses_cuda_source": "the candidate carries CUDA C++ source (load_inline)",
    "conv_dot_kernel": "a kernel named for a convolution calls tl.dot (a direct / template convolution)",
    "attention_unfused": "a compiler seed's attention runs unfused (library or math path) where a fused kernel fits",
    "conv_not_own_kernel": "a compiler seed's convolutions run in cuDNN or Inductor's template, not in our kernel",
    "main_work_not_own": "the review labelled the candidate's main work PyTorch's or a library's (torch_main_work / "
    "library_main_work): correct, not a custom-kernel success",
    "own_kernels_needed": "main_work_not_own under the run's kernels = custom: the candidate is no answer until its "
    "main work moves into kernels of its own, whatever else makes it faster",
}

METRICS: dict[str, str] = {
    "runtime_ms": "candidate runtime (median, ms)",
    "host_pct": "the host's median time to queue one call as % of the runtime (CUDA timings; near 100: the GPU "
    "waits on the launches)",
    "speedup_vs_eager": "eager runtime / candidate runtime (CUDA timings only)",
    "speedup_vs_compile": "torch.compile runtime / candidate runtime (CUDA timings only)",
    "sol_pct": "% of speed-of-light: lower-bound time / measured time * 100",
    "bandwidth_pct": "achieved DRAM bandwidth as % of the measured ceiling",
    "flop_pct": "achieved FLOP rate as % of the peak",
    "arithmetic_intensity": "FLOPs per byte that must move",
    "dram_throughput_pct": "ncu: DRAM throughput % of peak",
    "l2_throughput_pct": "ncu: L2 throughput % of peak",
    "sm_throughput_pct": "ncu: SM (compute) throughput % of peak",
    "achieved_occupancy_pct": "ncu: achieved occupancy %",
    "registers_per_thread": "registers per thread of the heaviest kernel",
    "spill_bytes": "register spill bytes of the heaviest kernel",
    "shared_mem_bytes": "shared memory per block of the heaviest kernel",
    "kernel_count": "kernels launched per forward call",
    "launch_count": "kernel launches per forward call",
    "branch_efficiency_pct": "ncu: branch efficiency % (divergence)",
    "stall_long_scoreboard_pct": "ncu: % of stalls waiting on global memory",
}

DERIVED: dict[str, str] = {
    "limiter_pct": "utilisation % of the primary limiter: max(dram_throughput_pct, sm_throughput_pct) "
    "when ncu metrics exist, else sol_pct",
    "headroom_pct": "100 - limiter_pct: how far the kernel is from its limiter's ceiling",
    "mem_util_pct": "memory-system utilisation %: dram_throughput_pct (ncu), else bandwidth_pct",
    "compute_util_pct": "compute utilisation %: sm_throughput_pct (ncu), else flop_pct",
    "dense_math": "arithmetic_intensity at or above the ridge point: matmul / conv / attention work for tensor cores",
    "conv_or_dense_math": "a convolution outside our kernel (conv_not_own_kernel), or dense_math",
    "memory_bound": "arithmetic_intensity below the ridge point (with ncu only: DRAM busier than the SMs)",
    "launches_per_forward": "measured launch_count, else the static estimate num_launch_sites + torch_ops_in_forward",
    "launches_hidden": "the GPU does not wait on the launches: host_pct below 50 (without it: runtime above 2 ms)",
}

NAMESPACES: dict[str, dict[str, str]] = {"features": FEATURES, "metrics": METRICS, "derived": DERIVED}

_PRED = re.compile(r"^\s*(features|metrics|derived)\.([a-z_][a-z0-9_]*)\s*(==|!=|>=|<=|>|<)\s*(\S+)\s*$")


class PredicateError(ValueError):
    """A predicate string that does not parse or names an unknown field."""


def parse_literal(text: str) -> Any:
    """Parse a predicate literal: number, true/false, or a bare word."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_predicate(text: str) -> tuple[str, str, str, Any]:
    """Split ``"features.uses_dot == false"`` into (namespace, name, op, value)."""
    m = _PRED.match(text)
    if not m:
        raise PredicateError(f"cannot parse predicate {text!r} (want 'NAMESPACE.NAME OP VALUE')")
    ns, name, op, lit = m.groups()
    if name not in NAMESPACES[ns]:
        raise PredicateError(f"unknown {ns} field {name!r} in predicate {text!r}")
    return ns, name, op, parse_literal(lit)


_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def predicate_value(
    text: str, features: dict[str, Any], metrics: dict[str, Any], derived: dict[str, Any] | None = None
) -> Any:
    """The actual value a predicate reads (None when absent)."""
    ns, name, _, _ = parse_predicate(text)
    source = {"features": features, "metrics": metrics, "derived": derived or {}}[ns]
    return source.get(name)


def evaluate_predicate(
    text: str, features: dict[str, Any], metrics: dict[str, Any], derived: dict[str, Any] | None = None
) -> bool | None:
    """Evaluate one predicate; None when the field is absent (unknown), never an exception."""
    _, _, op, value = parse_predicate(text)
    actual = predicate_value(text, features, metrics, derived)
    if actual is None:
        return None
    try:
        return bool(_OPS[op](actual, value))
    except TypeError:
        return None


class SkillCard(BaseModel):
    """One expert optimization method: when it applies, how it works, what it should change."""

    id: str = Field(description="kebab-case identifier, equal to the file stem")
    title: str = Field(description="one-line name of the method")
    bottlenecks: list[Bottleneck] = Field(min_length=1, description="bottleneck classes this method addresses")
    applies_when: list[str] = Field(
        default_factory=list,
        description="predicates that must not be false for the card to apply (unknown passes)",
    )
    avoid_when: list[str] = Field(
        default_factory=list, description="predicates any of which, when true, rule the card out"
    )
    mechanism: str = Field(min_length=20, description="why the method makes code faster")
    steps: list[str] = Field(min_length=1, description="how to apply it, in order")
    expected_effect: str = Field(min_length=5, description="the metric change it should cause")
    pitfalls: list[str] = Field(min_length=1, description="what breaks correctness or performance when applying it")
    triton_example: str = Field(min_length=20, description="a short original Triton sketch")
    cuda_equivalent: str | None = Field(default=None, description="the CUDA C++ counterpart")
    keywords: list[str] = Field(default_factory=list, description="extra retrieval terms")
    transform: str | None = Field(default=None, description="id of a deterministic transform implementing the method")

    @field_validator("id")
    @classmethod
    def _kebab(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", v):
            raise ValueError(f"id {v!r} is not kebab-case")
        return v

    @field_validator("applies_when", "avoid_when")
    @classmethod
    def _predicates(cls, v: list[str]) -> list[str]:
        for p in v:
            parse_predicate(p)
        return v

    def document(self) -> str:
        """The text embedded for retrieval."""
        return "\n".join(
            [
                self.title,
                "Bottlenecks: " + ", ".join(self.bottlenecks),
                self.mechanism,
                "Steps: " + " ".join(self.steps),
                "Effect: " + self.expected_effect,
                "Keywords: " + ", ".join(self.keywords),
            ]
        )


class CardError(ValueError):
    """A card file that fails validation; the message names the file and the field."""


def load_card(path: Path) -> SkillCard:
    """Load and validate one card file, raising :class:`CardError` naming file and field."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise CardError(f"{path.name}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise CardError(f"{path.name}: expected a mapping at top level")
    try:
        card = SkillCard.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "(card)"
        raise CardError(f"{path.name}: field {field!r}: {err['msg']}") from e
    if card.id != path.stem:
        raise CardError(f"{path.name}: field 'id': {card.id!r} does not match the file name")
    return card
