"""Endpoint preflight: one cheap request before any GPU work, with a readable error.

``optimize`` and ``eval`` call :func:`preflight` after reading the configuration. It lists the
endpoint's models (``GET /models``: no tokens are spent) with the configured key, and checks that
every configured model is served. A wrong key, an unreachable server or an unknown model becomes
one sentence naming what to fix; the CLI prints it and exits 2. A server without ``/models``
(404) gets one 1-token chat request instead. Scripted and replayed runs call nothing.
"""

from __future__ import annotations

import os
from typing import Any

from kernelskill.graph.context import ROLES, Context

PREFLIGHT_TIMEOUT_S = 20.0


class PreflightError(RuntimeError):
    """The endpoint cannot serve this run (bad key, unreachable, unknown model...)."""


def _endpoint(ctx: Context) -> str:
    return ctx.base_url or "https://api.openai.com/v1"


def _explain(ctx: Context, model: str, err: Exception) -> str:
    import openai

    url = _endpoint(ctx)
    if isinstance(err, openai.AuthenticationError):
        return (
            f"the endpoint {url} rejected the API key (401 Unauthorized): check ${ctx.api_key_env} "
            "(KERNELSKILL_API_KEY_ENV names the variable)"
        )
    if isinstance(err, openai.PermissionDeniedError):
        return f"the endpoint {url} refused access (403 Forbidden) for model {model!r}: check the key's permissions"
    if isinstance(err, openai.NotFoundError):
        return f"model {model!r} not found at {url} (404): check --model / KERNELSKILL_MODEL and the base URL"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err
        return (
            f"cannot reach the model endpoint {url}: {type(cause).__name__}: {cause}. Is the server running? "
            "Check KERNELSKILL_BASE_URL (e.g. http://localhost:8000/v1)"
        )
    if isinstance(err, openai.APIStatusError):
        return f"the endpoint {url} answered HTTP {err.status_code} for model {model!r}: {err.message}"
    return f"the endpoint {url} failed for model {model!r}: {type(err).__name__}: {err}"


def _client(ctx: Context) -> Any:
    import openai

    key = os.environ.get(ctx.api_key_env) or ("EMPTY" if ctx.base_url else None)
    if not key:
        raise PreflightError(
            f"no API key in ${ctx.api_key_env} (or set KERNELSKILL_BASE_URL to a local server that needs none)"
        )
    return openai.OpenAI(base_url=ctx.base_url or None, api_key=key, max_retries=1, timeout=PREFLIGHT_TIMEOUT_S)


def preflight(ctx: Context) -> list[str]:
    """Check the endpoint and every configured model; the models checked, or :class:`PreflightError`."""
    if ctx.scripted or ctx.replay:
        return []
    models = sorted({ctx.role_model(r) for r in ROLES if ctx.role_model(r)})
    if not models:  # offline engine: nothing to check (and the openai package may be absent)
        return []
    import openai

    client = _client(ctx)
    try:
        served = {m.id for m in client.models.list()}
    except openai.NotFoundError:  # no /models on this server: one tiny chat request per model instead
        for model in models:
            try:
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "ping"}], max_tokens=1
                )
            except openai.OpenAIError as e:
                raise PreflightError(_explain(ctx, model, e)) from None
        return models
    except openai.OpenAIError as e:
        raise PreflightError(_explain(ctx, models[0], e)) from None
    missing = [m for m in models if served and m not in served]
    if missing:
        shown = ", ".join(sorted(served)[:12]) + (" ..." if len(served) > 12 else "")
        raise PreflightError(
            f"model(s) {', '.join(map(repr, missing))} not served at {_endpoint(ctx)}; it serves: {shown}"
        )
    return models
