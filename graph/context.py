"""Typed run configuration: models per role, budgets, review settings (pydantic-settings).

Every field has a description. Values come from, highest first: the arguments a caller passes
(command-line flags, ``load_context(**overrides)``, a resumed run's saved configuration), a TOML
file (``kernelskill.toml`` in the working directory, the path in ``KERNELSKILL_CONFIG``, or the one
given to :func:`load_context`), environment variables ``KERNELSKILL_<FIELD>`` (upper-case), then the
defaults. Values are validated on the way in: an unknown key, a value of the wrong type or outside
a field's allowed set is an error that names the field.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

ROLES = ("generator", "diagnoser", "planner", "optimizer")
# fields with a closed set of values
CHOICES = {
    "structured_output": ("auto", "on", "off"),
    "precision": ("fp32", "tf32"),
    "kernels": ("any", "custom"),
    "memory": ("full", "no-long-term", "no-short-term", "none"),
}
# URL schemes of a Postgres checkpointer
POSTGRES_SCHEMES = ("postgres://", "postgresql://")
# what each memory setting keeps: (long-term, short-term)
MEMORIES = {"full": (True, True), "no-long-term": (False, True), "no-short-term": (True, False), "none": (False, False)}


def config_file(explicit: str | Path | None = None) -> Path:
    """The TOML file read: ``explicit``, else ``$KERNELSKILL_CONFIG``, else ``./kernelskill.toml``."""
    return Path(explicit or os.environ.get("KERNELSKILL_CONFIG", "kernelskill.toml"))


class Context(BaseSettings):
    """Configuration of one run (LangGraph runtime context)."""

    model_config = SettingsConfigDict(env_prefix="KERNELSKILL_", extra="forbid")

    model: str = Field(
        default="",
        description=("Chat model for every role unless a role overrides it (e.g. gpt-4.1)."),
    )
    base_url: str = Field(
        default="",
        description=("OpenAI-compatible endpoint (vLLM, SGLang, Ollama...); empty = OpenAI."),
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description=("Name of the environment variable holding the API key."),
    )
    generator_model: str = Field(default="", description=("Model for the generator."))
    diagnoser_model: str = Field(default="", description=("Model for the diagnoser."))
    planner_model: str = Field(default="", description=("Model for the planner."))
    optimizer_model: str = Field(default="", description=("Model for the optimizer."))
    generator_temperature: float = Field(default=0.2, description=("Generator temperature (code: cold)."))
    diagnoser_temperature: float = Field(default=0.1, description=("Diagnoser temperature (code: cold)."))
    planner_temperature: float = Field(default=0.8, description=("Planner temperature (plans: hotter)."))
    optimizer_temperature: float = Field(default=0.1, description=("Optimizer temperature (code: cold)."))
    scripted: str = Field(
        default="",
        description=("Path of a scripted-model file (demo/tests): no endpoint is called."),
    )
    max_retries: int = Field(
        default=4,
        description=("Retries of a model call on rate limits (429), 5xx and connection errors (backoff)."),
    )
    request_timeout_s: float = Field(default=300.0, description=("Time limit of one model call (s)."))
    max_completion_tokens: int = Field(
        default=16384,
        description=(
            "Completion limit sent with every model call (0 = the server's own); a reply cut "
            "there is reported as truncated."
        ),
    )
    structured_output: str = Field(
        default="auto",
        description=(
            "auto: structured verdicts where the endpoint supports them, plain text otherwise or when a "
            "reply does not parse; on: as auto, but a server refusing response_format is an error; off: plain text."
        ),
    )
    preflight: bool = Field(
        default=True,
        description=("Check the endpoint, key and models with one cheap request before the run."),
    )
    record: str = Field(
        default="",
        description=("Append every model call (prompt hash, prompt, reply, usage) to this cassette."),
    )
    replay: str = Field(
        default="",
        description=("Answer every model call from this cassette: no endpoint is called."),
    )
    price_in_per_mtok: float = Field(
        default=0.0, description=("USD per 1M input tokens, for the cost estimate (0 = unknown).")
    )
    price_out_per_mtok: float = Field(
        default=0.0, description=("USD per 1M output tokens, for the cost estimate (0 = unknown).")
    )
    engine: str = Field(
        default="auto",
        description=(
            "auto (a model when one is configured, else the offline engine on CUDA), llm, or offline "
            "(compiler seed + deterministic skills, no model; needs CUDA)."
        ),
    )
    compiler_seed: bool = Field(
        default=True,
        description=("On CUDA, add TorchInductor's kernels for the task as seed candidates."),
    )
    split_gemm: bool = Field(
        default=False,
        description=(
            "Also try, in dot_precision and conv_gemm, a recapture with every fp32 GEMM as one TF32 "
            "GEMM over 3xTF32 split operands, where the precision policy allows a single-pass TF32 dot "
            "(H200: correct on 4 of 7 tasks, the fastest on none)."
        ),
    )
    seed_timeout_s: float = Field(
        default=600.0, description=("Time limit of one compiler-seed capture (TorchInductor compile).")
    )
    precision: str = Field(
        default="fp32",
        description=(
            "fp32: every fp32 product fp32-accurate (ieee, tf32x3), single-pass TF32 only where the "
            "reference itself uses it under PyTorch's defaults (cuDNN convolutions), baselines at PyTorch's "
            "defaults; tf32: TF32 products allowed everywhere, reference and baselines with TF32 matmuls allowed."
        ),
    )
    kernels: str = Field(
        default="any",
        description=(
            "any: the fastest correct candidate wins (library or PyTorch main work keeps its label); "
            "custom: a candidate whose main work runs in its own kernels always beats one that does not."
        ),
    )
    memory: str = Field(
        default="full",
        description=(
            "full: both memories; no-long-term: no policy decision, skill cards or priors (the planner's model, "
            "or offline a seeded uniform draw over the transforms, picks the method); no-short-term: no trajectory, "
            "earlier failures or diagnoses in any prompt and no exclusion of failed plans (each round sees the best "
            "candidate and its latest review only); none: neither (ablations)."
        ),
    )
    max_rounds: int = Field(default=3, description=("Optimization rounds after the seed round."))
    max_repairs: int = Field(default=3, description=("Repair attempts per candidate before it is abandoned."))
    seeds: int = Field(default=1, description=("Seed candidates the generator writes."))
    parents: int = Field(default=3, description=("Correct candidates kept as parents (best first)."))
    explore: float = Field(default=0.1, description=("Chance that a round starts from a parent other than the best."))
    max_tokens: int = Field(
        default=0, description=("Stop when the model calls have used this many tokens (0 = no limit).")
    )
    max_wall_s: float = Field(
        default=0.0, description=("Stop after this much wall time since the start, seconds (0 = none).")
    )
    target_sol_pct: float = Field(
        default=0.0,
        description=("Stop once the best reaches this % of speed-of-light (review sol_pct; 0 = off)."),
    )
    patience: int = Field(
        default=0,
        description=("Stop after this many optimization rounds in a row without improvement (0 = off)."),
    )
    device: str = Field(
        default="auto",
        description=("Where candidates run: auto (CUDA if present), cuda, or cpu."),
    )
    review_timeout_s: float = Field(default=300.0, description=("Wall-time limit of one evaluation (seconds)."))
    correctness_trials: int = Field(default=5, description=("Fresh seeded inputs each candidate must match."))
    float64_truth: bool = Field(
        default=True,
        description=(
            "An output outside atol/rtol of the reference still passes when it is within 2x the "
            "reference's own float32 error of a float64 run of the reference (false = atol/rtol only)."
        ),
    )
    ncu: bool = Field(
        default=False,
        description=("Profile each correct candidate with Nsight Compute on CUDA (adds ~10 s a review)."),
    )
    seed: int = Field(default=42, description=("Seed for weights and inputs."))
    run_dir: str = Field(
        default="",
        description=("Directory for this run's artifacts (candidates, logs, report)."),
    )
    skills_db: str = Field(
        default="",
        description=("Chroma directory of the skills index (default ~/.cache/kernelskill)."),
    )
    checkpointer: str = Field(
        default="sqlite",
        description=(
            "Where checkpoints go: sqlite (checkpoints.sqlite in the run directory) or a postgres:// URL (one database "
            "for every run and host; the skill outcomes then go there too)."
        ),
    )
    cluster: str = Field(
        default="",
        description=(
            "Where `eval` runs its tasks: empty = this host's process pool; ray = a local Ray instance (started, or "
            "the one already running here); auto = the Ray cluster this node belongs to; ray://HOST:PORT = a Ray "
            "cluster through Ray Client."
        ),
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the TOML file (:func:`config_file`), then ``KERNELSKILL_*`` variables."""
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_file(_TOML.get()))
        return (init_settings, toml, env_settings)

    @field_validator(*CHOICES, mode="before")
    @classmethod
    def _one_of(cls, value: Any, info: Any) -> Any:
        allowed = CHOICES[info.field_name]
        if value not in allowed:
            raise ValueError(f"{info.field_name} must be one of {', '.join(allowed)}, not {value!r}")
        return value

    @field_validator("checkpointer", mode="before")
    @classmethod
    def _checkpointer(cls, value: Any) -> Any:
        if value != "sqlite" and not str(value).startswith(POSTGRES_SCHEMES):
            raise ValueError(f"checkpointer must be sqlite or a postgres://... URL, not {value!r}")
        return value

    @field_validator("cluster", mode="before")
    @classmethod
    def _cluster(cls, value: Any) -> Any:
        if value not in ("", "ray", "auto") and not (str(value).startswith("ray://") and len(str(value)) > 6):
            raise ValueError(f"cluster must be empty, ray, auto or ray://HOST:PORT, not {value!r}")
        return value

    def postgres(self) -> str:
        """The Postgres URL of the checkpointer (and the outcome store), or "" with SQLite."""
        return "" if self.checkpointer == "sqlite" else self.checkpointer

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

    def long_term_memory(self) -> bool:
        """True when the nodes read the skills knowledge base: policy, cards, priors (``full``, ``no-short-term``)."""
        return MEMORIES[self.memory][0]

    def short_term_memory(self) -> bool:
        """True when the nodes read the task's trajectory, failures and tried plans (``full``, ``no-long-term``)."""
        return MEMORIES[self.memory][1]

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
        return self.model_dump()


_TOML: ContextVar[str | Path | None] = ContextVar("kernelskill_config_file", default=None)


def load_context(config_path: str | Path | None = None, **overrides: Any) -> Context:
    """A :class:`Context` from ``overrides`` (None = not given), the TOML file, the environment, the defaults.

    Raises:
        ValueError: one sentence per bad value or unknown key, naming the field (and the file).
    """
    token = _TOML.set(config_path)
    try:
        return Context(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        raise ValueError(describe_errors(e, config_path)) from None
    finally:
        _TOML.reset(token)


def describe_errors(error: ValidationError, path: str | Path | None = None) -> str:
    """The validation errors of a configuration, one clause each, naming the field."""
    where = f" (arguments, {config_file(path)} or KERNELSKILL_* variables)"
    parts = []
    for e in error.errors():
        field = ".".join(str(x) for x in e["loc"]) or "configuration"
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown configuration key {field!r}")
        else:
            parts.append(f"{field}: {str(e['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts) + where


def memory_line(memory: str) -> str:
    """One line stating which memories a run used, for every report."""
    return {
        "full": "full (long-term: skills knowledge base, policy and priors; short-term: the task's trajectory)",
        "no-long-term": "no-long-term (ablation: no policy, skill cards or priors; the short-term trajectory only)",
        "no-short-term": "no-short-term (ablation: no trajectory, failures or tried plans; each round sees the best "
        "and its latest review)",
        "none": "none (ablation: neither the skills knowledge base nor the task's trajectory)",
    }.get(memory, memory)


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
