"""Chat models for the model-backed roles: ``ChatOpenAI`` from the run context, or a scripted model.

Any OpenAI-compatible server works through ``base_url``. The scripted model (``Context.scripted``)
serves replies from a JSON file and is used by ``make demo`` and the tests; its output is labelled
as scripted everywhere it is shown.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import BaseModel

from kernelskill.graph.context import Context

from .cassette import prompt_hash, record_call, replay_call

log = logging.getLogger(__name__)


class ModelConfigError(RuntimeError):
    """No usable model configuration for a role that needs one."""


class ModelUnavailable(RuntimeError):
    """The endpoint kept failing (5xx, connection, timeout, rate limit) after the client's retries.

    The run pauses: the checkpoint keeps every finished node and ``kernelskill resume`` continues it.
    """


def _unavailable_errors() -> tuple[type[BaseException], ...]:
    import openai

    return (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError)


def reply_text(content: Any) -> str:
    """The text of a reply's content: a string (Chat Completions) or a list of content blocks.

    The Responses API (and some servers) return blocks such as ``{"type": "text" | "output_text",
    "text": ...}``; reasoning and tool blocks carry no answer and are skipped, a refusal is kept.
    """
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            kind = block.get("type", "text")
            if kind in ("text", "output_text") and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif kind == "refusal" and isinstance(block.get("refusal"), str):
                parts.append(block["refusal"])
    return "\n".join(parts)


def finish_reason(message: Any) -> str:
    """Why the model stopped (``stop``, ``length``...), from Chat Completions or Responses metadata."""
    meta = getattr(message, "response_metadata", None) or {}
    reason = meta.get("finish_reason") or ""
    if not reason and meta.get("status") == "incomplete":
        detail = (meta.get("incomplete_details") or {}).get("reason", "")
        reason = "length" if detail == "max_output_tokens" else "incomplete"
    return str(reason)


def save_reply(ctx: Context, role: str, index: int, text: str, meta: dict[str, Any]) -> None:
    """Keep every model reply, parsed or not, in the run directory (``replies/ROLE-INDEX.md``)."""
    if not ctx.run_dir:
        return
    folder = Path(ctx.run_dir) / "replies"
    folder.mkdir(parents=True, exist_ok=True)
    head = ", ".join(f"{k}: {v}" for k, v in meta.items() if v not in (None, ""))
    (folder / f"{role}-{index:03d}.md").write_text(f"<!-- {head} -->\n{text}")


class ScriptedChatModel(BaseChatModel):
    """Replies from a script file: the first rule whose role matches and whose regex is found.

    Script format (JSON)::

        {"label": "demo", "rules": [
            {"role": "generator", "reply_file": "seed.md"},
            {"role": "optimizer", "match": "Round: 2", "reply": "..."}]}

    A rule may also set ``finish_reason`` (e.g. ``"length"``: a reply cut at the completion limit)
    and ``content_blocks: true`` (the reply as a list of content blocks, as the Responses API returns).

    Matching on prompt content (not call order) keeps replies the same when a killed run resumes
    in a new process.
    """

    role: str
    rules: list[dict[str, Any]]
    base_dir: str = "."
    label: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "kernelskill-scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt = "\n".join(str(m.content) for m in messages)
        reply = f"(scripted model {self.label!r} has no reply for role {self.role!r})"
        finish, blocks = "", False
        for rule in self.rules:
            if rule.get("role") != self.role:
                continue
            if rule.get("match") and not re.search(rule["match"], prompt):
                continue
            if "reply_file" in rule:
                reply = (Path(self.base_dir) / rule["reply_file"]).read_text()
            else:
                reply = rule.get("reply", "")
            finish = rule.get("finish_reason", "")
            blocks = rule.get("content_blocks", False)
            break
        usage = {
            "input_tokens": len(prompt) // 4,
            "output_tokens": len(reply) // 4,
            "total_tokens": (len(prompt) + len(reply)) // 4,
        }
        content: Any = [{"type": "output_text", "text": reply}] if blocks else reply  # the Responses API's shape
        meta = {"finish_reason": finish} if finish else {}
        msg = AIMessage(content=content, usage_metadata=usage, response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=msg)])


@lru_cache(maxsize=16)
def _load_script(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def chat_model(ctx: Context, role: str) -> BaseChatModel:
    """The chat model for ``role`` under ``ctx``; :class:`ModelConfigError` when none is set."""
    if ctx.scripted:
        path = Path(ctx.scripted).resolve()
        if not path.is_file():
            raise ModelConfigError(f"scripted model file not found: {path}")
        script = _load_script(str(path))
        return ScriptedChatModel(
            role=role,
            rules=script.get("rules", []),
            base_dir=str(path.parent),
            label=script.get("label", path.stem),
        )
    name = ctx.role_model(role)
    if not name:
        raise ModelConfigError(
            f"no model configured for the {role}: set KERNELSKILL_MODEL (and KERNELSKILL_BASE_URL "
            "for a non-OpenAI server), pass --model, or use --scripted FILE"
        )
    from langchain_openai import ChatOpenAI

    key = os.environ.get(ctx.api_key_env) or ("EMPTY" if ctx.base_url else None)
    if not key:
        raise ModelConfigError(
            f"model {name!r} needs an API key in ${ctx.api_key_env} (or set KERNELSKILL_BASE_URL "
            "to a local server that needs none)"
        )
    return ChatOpenAI(
        model=name,
        base_url=ctx.base_url or None,
        api_key=key,  # type: ignore[arg-type]
        temperature=ctx.role_temperature(role),
        max_retries=ctx.max_retries,
        timeout=ctx.request_timeout_s,
        max_tokens=ctx.max_completion_tokens or None,  # type: ignore[call-arg]
    )


def role_has_model(ctx: Context, role: str) -> bool:
    """True when ``role`` itself is model-backed: its own model, a scripted rule, or replayed calls.

    The planner is deterministic unless this holds (the shared ``model`` does not make it so).
    """
    if ctx.replay:
        from .cassette import load_cassette

        return any(e["role"] == role for e in load_cassette(ctx.replay))
    if ctx.scripted:
        path = Path(ctx.scripted).resolve()
        return path.is_file() and any(r.get("role") == role for r in _load_script(str(path)).get("rules", []))
    return bool(getattr(ctx, f"{role}_model", ""))


def call_index(state: Mapping[str, Any], role: str) -> int:
    """The role's next call number in this run (0-based), from the state's token records."""
    return sum(1 for t in state.get("tokens", []) if t.get("role") == role)


def model_label(ctx: Context, role: str) -> str:
    """The model name recorded with a call."""
    if ctx.replay:
        return "replay"
    return "scripted" if ctx.scripted else ctx.role_model(role)


_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?:[eE][-+]?\d+)?")


def _portable(ctx: Context, text: str) -> str:
    """The prompt as the cassette keys it: stable across runs of the same trajectory.

    This run's directory becomes ``$RUN_DIR`` and decimal numbers become ``#.#``: timings and
    profile metrics differ from run to run, the choices they lead to (plans, code) do not.
    """
    if ctx.run_dir:
        text = text.replace(ctx.run_dir, "$RUN_DIR")
    return _DECIMAL.sub("#.#", text)


def _usage_record(role: str, model: str, usage: dict[str, Any], finish: str = "") -> dict[str, Any]:
    """The token-usage record a model call adds to the state (``truncated``: cut at the completion limit)."""
    record = {
        "role": role,
        "model": model,
        "input_tokens": int(usage.get("input_tokens", 0)),
        "output_tokens": int(usage.get("output_tokens", 0)),
    }
    if finish:
        record["finish_reason"] = finish
        record["truncated"] = finish in ("length", "incomplete")
    return record


def _invoke(model: Any, system: str, user: str) -> Any:
    """``model.invoke`` on the two messages; an endpoint still failing after its retries pauses the run."""
    try:
        return model.invoke([SystemMessage(content=system), HumanMessage(content=user)])
    except _unavailable_errors() as e:
        raise ModelUnavailable(f"the model endpoint is unavailable after the retries: {type(e).__name__}: {e}") from e


def _record_call(
    ctx: Context, index: int, system: str, user: str, text: str, record: dict[str, Any], **extra: Any
) -> None:
    """Append one call to the ``ctx.record`` cassette (prompts in their portable, hashed form)."""
    key_system, key_user = _portable(ctx, system), _portable(ctx, user)
    record_call(
        ctx.record,
        {
            "role": record["role"],
            "index": index,
            "sha256": prompt_hash(key_system, key_user),
            "model": record["model"],
            "system": key_system,
            "user": key_user,
            "reply": text,
            **extra,
            "usage": {"input_tokens": record["input_tokens"], "output_tokens": record["output_tokens"]},
        },
    )


def ask(ctx: Context, role: str, system: str, user: str, index: int = 0) -> tuple[str, dict[str, Any]]:
    """One model call; returns the reply text and a token-usage record for the state.

    With ``ctx.replay`` the reply comes from the cassette (no model is built or called; a prompt
    the cassette lacks raises :class:`~kernelskill.nodes.model.cassette.ReplayDivergence`); with
    ``ctx.record`` the call is appended to the cassette. ``index`` is the role's call number
    (:func:`call_index`), used to name a diverging call.
    """
    finish = ""
    if ctx.replay:
        entry = replay_call(ctx.replay, role, index, _portable(ctx, system), _portable(ctx, user))
        text, usage, finish = entry["reply"], entry.get("usage") or {}, entry.get("finish_reason", "")
    else:
        reply = _invoke(chat_model(ctx, role), system, user)
        usage = dict(getattr(reply, "usage_metadata", None) or {})
        text, finish = reply_text(reply.content), finish_reason(reply)
    record = _usage_record(role, model_label(ctx, role), usage, finish)
    if ctx.record and not ctx.replay:
        _record_call(ctx, index, system, user, text, record, finish_reason=finish)
    save_reply(ctx, role, index, text, {"finish_reason": finish, "model": record["model"]})
    return text, record


def _structured_model(ctx: Context, role: str, schema: type[BaseModel]) -> Any | None:
    """``with_structured_output`` on the role's model, or None when it lacks support (scripted...) or is off."""
    if ctx.structured_output == "off":
        return None
    model = chat_model(ctx, role)
    if isinstance(model, ScriptedChatModel):
        return None
    try:
        return model.with_structured_output(schema, include_raw=True)
    except NotImplementedError:
        return None


def ask_verdict(
    ctx: Context, role: str, system: str, user: str, schema: type[BaseModel], index: int = 0
) -> tuple[BaseModel | None, str, dict[str, Any]]:
    """A call that asks for a structured verdict: ``(verdict or None, reply text, usage record)``.

    Uses structured output where the endpoint supports it (``Context.structured_output``: ``auto``,
    ``on``, ``off``). No reply stops the run: a refusal of ``response_format`` (400, 422; with
    ``on`` these are errors), a reply that does not parse or validate, or a length cut fall back to
    the plain reply text with ``verdict`` None, which the caller parses tolerantly (the raw reply
    when the client kept it, else one plain call). An endpoint still failing after its retries
    raises :class:`ModelUnavailable` (the run pauses, resumable). Record/replay work as in
    :func:`ask`: a structured reply is stored as its JSON with ``"structured": true``.
    """
    if ctx.replay:
        key_system, key_user = _portable(ctx, system), _portable(ctx, user)
        entry = replay_call(ctx.replay, role, index, key_system, key_user)
        record = _usage_record(role, "replay", entry.get("usage") or {})
        verdict = schema.model_validate_json(entry["reply"]) if entry.get("structured") else None
        return verdict, entry["reply"], record
    structured = _structured_model(ctx, role, schema)
    if structured is None:
        text, record = ask(ctx, role, system, user, index)
        return None, text, record
    try:
        out = _invoke(structured, system, user)
    except ModelUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 - refusal, parse / validation error, length cut: plain text instead
        if ctx.structured_output == "on" and _refused(e):
            raise
        log.warning("%s: structured output failed (%s: %s); asking for plain text", role, type(e).__name__, e)
        text, record = ask(ctx, role, system, user, index)
        record["structured_fallback"] = type(e).__name__
        return None, text, record
    raw, parsed = out.get("raw"), out.get("parsed")
    usage = dict(getattr(raw, "usage_metadata", None) or {})
    finish = finish_reason(raw)
    if finish in ("length", "incomplete"):
        parsed = None  # a cut reply is never trusted as a verdict
    text = parsed.model_dump_json() if parsed is not None else reply_text(getattr(raw, "content", "") or "")
    record = _usage_record(role, model_label(ctx, role), usage, finish)
    if ctx.record:
        _record_call(ctx, index, system, user, text, record, structured=parsed is not None, finish_reason=finish)
    save_reply(
        ctx, role, index, text, {"finish_reason": finish, "model": record["model"], "structured": parsed is not None}
    )
    return parsed, text, record


def _refused(exc: BaseException) -> bool:
    """The server refused the request itself (400 / 422), as opposed to a reply that did not parse."""
    import openai

    return isinstance(exc, (openai.BadRequestError, openai.UnprocessableEntityError))
