"""Which engine a run uses: a model (``llm``) or the offline engine (``offline``), or neither.

- ``llm``: a model endpoint, a scripted model or a replay cassette is configured. On CUDA the
  compiler seed (TorchInductor's kernels) is one more seed, shown to the model as the starting point.
- ``offline``: no model, a CUDA GPU: the compiler seeds, the reviewer, the feature extractor, the
  policy and the deterministic skills (the cards that name a ``transform``; the CLI banner lists them) run the
  whole graph.
- neither: no model and no CUDA; :func:`no_engine_message` says what to configure.

``Context.engine`` forces one (``llm`` / ``offline``); ``auto`` (default) picks as above.
"""

from __future__ import annotations

from typing import Literal

from .context import Context

Engine = Literal["llm", "offline"]


def on_cuda(ctx: Context) -> bool:
    """True when candidates of this run execute on a CUDA GPU."""
    if ctx.device == "cpu":
        return False
    from kernelskill.runner.env import cuda_available

    return cuda_available()


def engine_for(ctx: Context, cuda: bool | None = None) -> Engine | None:
    """The engine this configuration runs with here, or None when none can run."""
    cuda = on_cuda(ctx) if cuda is None else cuda
    if ctx.engine == "offline":
        return "offline" if cuda else None
    if ctx.engine == "llm":
        return "llm" if ctx.has_llm() else None
    if ctx.has_llm():
        return "llm"
    return "offline" if cuda else None


def no_engine_message(ctx: Context, cuda: bool) -> str:
    """What to configure when :func:`engine_for` finds no engine."""
    model_hint = (
        "  - a model: KERNELSKILL_MODEL=gpt-4.1 and OPENAI_API_KEY=... (any OpenAI-compatible server:\n"
        "    add KERNELSKILL_BASE_URL=http://localhost:8000/v1 for vLLM / SGLang / Ollama), or --model;\n"
        "  - a scripted model for a dry run: --scripted FILE (see evals/demo/script.json);\n"
    )
    if ctx.engine == "offline":
        return (
            "The offline engine needs a CUDA GPU (it compiles the reference with TorchInductor and times "
            f"candidates on the GPU), and {'device is set to cpu' if ctx.device == 'cpu' else 'none is visible'}. "
            "Run on a GPU machine, or configure a model instead:\n" + model_hint
        )
    if ctx.engine == "llm":
        return "engine = llm, but no model is configured. Configure one of:\n" + model_hint
    return (
        "No model endpoint is configured and no CUDA GPU is visible, so neither engine can run.\n"
        "Either run on a machine with a CUDA GPU: with no model, the offline engine (TorchInductor compiler "
        "seed + deterministic skills) needs no key; or configure a model:\n" + model_hint
    )
