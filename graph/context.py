"""Typed run configuration: models per role, budgets, review settings.

Every field has a description and an environment-variable fallback (``KERNELSKILL_<FIELD>``,
upper-case). A TOML config file (``kernelskill.toml`` in the working directory, or the path in
``KERNELSKILL_CONFIG``) may set the same fields; explicit arguments win over the file, the file
over the environment, the environment over the defaults.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

ROLES = ("generator", "diagnoser", "planner", "optimizer")
# fields with a closed set of values
CHOICES = {"structured_output": ("auto", "on", "off"), "precision": ("fp32", "tf32"), "kernels": ("any", "custom")}


def _env(name: str, default: Any) -> Any:
    raw = os.environ.get(f"KERNELSKILL_{name.upper()}")
    if raw is None:
        return default
    if isinstance(default, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


@dataclass(kw_only=True)
class Context:
    """Configuration of one run (LangGraph runtime context)."""

    model: str = field(
        default="",
        metadata={"description": "Chat model for every role unless a role overrides it (e.g. gpt-4.1)."},
    )
    base_url: str = field(
        default="",
        metadata={"description": "OpenAI-compatible endpoint (vLLM, SGLang, Ollama...); empty = OpenAI."},
    )
    api_key_env: str = field(
        default="OPENAI_API_KEY",
        metadata={"description": "Name of the environment variable holding the API key."},
    )
    generator_model: str = field(default="", metadata={"description": "Model for the generator."})
    diagnoser_model: str = field(default="", metadata={"description": "Model for the diagnoser."})
    planner_model: str = field(default="", metadata={"description": "Model for the planner."})
    optimizer_model: str = field(default="", metadata={"description": "Model for the optimizer."})
    generator_temperature: float = field(default=0.2, metadata={"description": "Generator temperature (code: cold)."})
    diagnoser_temperature: float = field(default=0.1, metadata={"description": "Diagnoser temperature (code: cold)."})
    planner_temperature: float = field(default=0.8, metadata={"description": "Planner temperature (plans: hotter)."})
    optimizer_temperature: float = field(default=0.1, metadata={"description": "Optimizer temperature (code: cold)."})
    scripted: str = field(
        default="",
        metadata={"description": "Path of a scripted-model file (demo/tests): no endpoint is called."},
    )
    max_retries: int = field(
        default=4,
        metadata={"description": "Retries of a model call on rate limits (429), 5xx and connection errors (backoff)."},
    )
    request_timeout_s: float = field(default=300.0, metadata={"description": "Time limit of one model call (s)."})
    max_completion_tokens: int = field(
        default=16384,
        metadata={
            "description": "Completion limit sent with every model call (0 = the server's own); a reply cut "
            "there is reported as truncated."
        },
    )
    structured_output: str = field(
        default="auto",
        metadata={
            "description": "auto: structured verdicts where the endpoint supports them, plain text otherwise or when a "
            "reply does not parse; on: as auto, but a server refusing response_format is an error; off: plain text."
        },
    )
    preflight: bool = field(
        default=True,
        metadata={"description": "Check the endpoint, key and models with one cheap request before the run."},
    )
    record: str = field(
        default="",
        metadata={"description": "Append every model call (prompt hash, prompt, reply, usage) to this cassette."},
    )
    replay: str = field(
        default="",
        metadata={"description": "Answer every model call from this cassette: no endpoint is called."},
    )
    price_in_per_mtok: float = field(
        default=0.0, metadata={"description": "USD per 1M input tokens, for the cost estimate (0 = unknown)."}
    )
    price_out_per_mtok: float = field(
        default=0.0, metadata={"description": "USD per 1M output tokens, for the cost estimate (0 = unknown)."}
    )
    engine: str = field(
        default="auto",
        metadata={
            "description": "auto (a model when one is configured, else the offline engine on CUDA), llm, or offline "
            "(compiler seed + deterministic skills, no model; needs CUDA)."
        },
    )
    compiler_seed: bool = field(
        default=True,
        metadata={"description": "On CUDA, add TorchInductor's kernels for the task as seed candidates."},
    )
    split_gemm: bool = field(
        default=False,
        metadata={
            "description": "Also try, in dot_precision and conv_gemm, a recapture with every fp32 GEMM as one TF32 "
            "GEMM over 3xTF32 split operands (H200: correct on 4 of 7 tasks, the fastest on none)."
        },
    )
    seed_timeout_s: float = field(
        default=600.0, metadata={"description": "Time limit of one compiler-seed capture (TorchInductor compile)."}
    )
    precision: str = field(
        default="fp32",
        metadata={
            "description": "fp32: every fp32 product fp32-accurate (ieee, tf32x3), single-pass TF32 only where the "
            "reference itself uses it under PyTorch's defaults (cuDNN convolutions), baselines at PyTorch's "
            "defaults; tf32: TF32 products allowed everywhere, reference and baselines with TF32 matmuls allowed."
        },
    )
    kernels: str = field(
        default="any",
        metadata={
            "description": "any: the fastest correct candidate wins (library or PyTorch main work keeps its label); "
            "custom: a candidate whose main work runs in its own kernels always beats one that does not."
        },
    )
    max_rounds: int = field(default=3, metadata={"description": "Optimization rounds after the seed round."})
    max_repairs: int = field(
        default=3, metadata={"description": "Repair attempts per candidate before it is abandoned."}
    )
    seeds: int = field(default=1, metadata={"description": "Seed candidates the generator writes."})
    parents: int = field(default=3, metadata={"description": "Correct candidates kept as parents (best first)."})
    explore: float = field(
        default=0.1, metadata={"description": "Chance that a round starts from a parent other than the best."}
    )
    max_tokens: int = field(
        default=0, metadata={"description": "Stop when the model calls have used this many tokens (0 = no limit)."}
    )
    max_wall_s: float = field(
        default=0.0, metadata={"description": "Stop after this much wall time since the start, seconds (0 = none)."}
    )
    target_sol_pct: float = field(
        default=0.0,
        metadata={"description": "Stop once the best reaches this % of speed-of-light (review sol_pct; 0 = off)."},
    )
    patience: int = field(
        default=0,
        metadata={"description": "Stop after this many optimization rounds in a row without improvement (0 = off)."},
    )
    device: str = field(
        default="auto",
        metadata={"description": "Where candidates run: auto (CUDA if present), cuda, or cpu."},
    )
    review_timeout_s: float = field(
        default=300.0, metadata={"description": "Wall-time limit of one evaluation (seconds)."}
    )
    correctness_trials: int = field(
        default=5, metadata={"description": "Fresh seeded inputs each candidate must match."}
    )
    float64_truth: bool = field(
        default=True,
        metadata={
            "description": "An output outside atol/rtol of the reference still passes when it is within 2x the "
            "reference's own float32 error of a float64 run of the reference (false = atol/rtol only)."
        },
    )
    ncu: bool = field(
        default=False,
        metadata={"description": "Profile each correct candidate with Nsight Compute on CUDA (adds ~10 s a review)."},
    )
    seed: int = field(default=42, metadata={"description": "Seed for weights and inputs."})
    run_dir: str = field(
        default="",
        metadata={"description": "Directory for this run's artifacts (candidates, logs, report)."},
    )
    skills_db: str = field(
        default="",
        metadata={"description": "Chroma directory of the skills index (default ~/.cache/kernelskill)."},
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            default = f.default if f.default is not MISSING else None
            if getattr(self, f.name) == default:
                setattr(self, f.name, _env(f.name, default))
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")

    def role_model(self, role: str) -> str:
        """The model name for ``role`` (its own override, else the shared one)."""
        return getattr(self, f"{role}_model", "") or self.model

    def role_temperature(self, role: str) -> float:
        """The temperature for ``role``."""
        return float(getattr(self, f"{role}_temperature", 0.2))

    def has_llm(self) -> bool:
        """True when a model endpoint, a scripted model or a replay cassette is configured."""
        return bool(self.scripted or self.replay or self.model or any(self.role_model(r) for r in ROLES))

    def policy(self) -> dict[str, str]:
        """The run's comparison policies, stated in every report and summary."""
        return {"precision": self.precision, "kernels": self.kernels}

    def budget(self) -> dict[str, Any]:
        """The limits the routers read, for ``state["budget"]``."""
        return {
            "max_rounds": self.max_rounds,
            "max_repairs": self.max_repairs,
            "max_tokens": self.max_tokens,
            "max_wall_s": self.max_wall_s,
            "target_sol_pct": self.target_sol_pct,
            "patience": self.patience,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (saved in the run directory so ``resume`` uses the same settings)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def load_context(config_path: str | Path | None = None, **overrides: Any) -> Context:
    """Build a :class:`Context` from defaults, environment, a TOML file and ``overrides``."""
    values: dict[str, Any] = {}
    path = Path(config_path or os.environ.get("KERNELSKILL_CONFIG", "kernelskill.toml"))
    if path.is_file():
        with open(path, "rb") as f:
            data = tomllib.load(f)
        known = {f.name for f in fields(Context)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown configuration keys {unknown}")
        values.update(data)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Context(**values)


def policy_line(policy: dict[str, str]) -> str:
    """One line stating both policies, for every report."""
    precision = {
        "fp32": "fp32 (fp32-accurate products; TF32 only where the reference uses it; baselines at PyTorch's defaults)",
        "tf32": "tf32 (TF32 products allowed; eager and torch.compile timed with TF32 matmuls allowed)",
    }.get(policy["precision"], f"{policy['precision']} (TF32 products allowed, baselines fp32)")
    kernels = {
        "any": "any (the fastest correct candidate; library / PyTorch main work counts, with its label)",
        "custom": "custom (only candidates whose main work runs in their own kernels are scored)",
    }.get(policy["kernels"], policy["kernels"])
    return f"precision {precision}; kernels {kernels}"
