"""Settings of the ``openai`` engine, from ``--engine-opt key=value`` and the environment."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from omni_grpc.engines.tools import BUILTIN_TOOLS, Tool, load_tools, merge_tools

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful agent. You can read files and list directories in the workspace "
    "with your tools."
)
# Thinking levels (RunOptions) onto OpenAI's reasoning_effort; "none" sends nothing.
REASONING_EFFORT = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}


@dataclass(frozen=True)
class OpenAIConfig:
    base_url: str
    model: str
    api_key: str | None = None
    provider: str = "openai"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    # A token count, or "unknown" when the catalogue of the endpoint is not known.
    context_window: int | str = "unknown"
    agent_state: str = ""
    # Seconds: connecting, and the longest silence inside a stream before "timeout".
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    max_attempts: int = 5
    # The first retry waits this long, then doubles, capped at retry_cap_ms.
    retry_base_ms: int = 2000
    retry_cap_ms: int = 30000
    # The longest wait an endpoint's Retry-After (or retry-after-ms) gets: a
    # longer one is cut to this. 60 s, the bound the OpenAI SDK trusts.
    retry_after_max_ms: int = 60000
    # Model requests per run (each tool round is one); a runaway loop stops here.
    max_turns: int = 50
    # Send recorded reasoning back under its upstream field (fidelity.reasoning_field).
    replay_reasoning: bool = True
    tools: dict[str, Tool] = field(default_factory=dict)
    temperature: float | None = None
    max_tokens: int | None = None

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], env: Mapping[str, str] | None = None
    ) -> OpenAIConfig:
        """Builds the config; raises ``ValueError`` naming the bad option."""
        env = os.environ if env is None else env
        opts = dict(options)
        known = {
            "base_url", "model", "api_key", "provider", "system_prompt", "context_window",
            "agent_state", "connect_timeout", "timeout", "max_attempts", "retry_base_ms",
            "retry_cap_ms", "retry_after_max_ms", "max_turns", "replay_reasoning", "tools",
            "builtin_tools", "temperature", "max_tokens",
        }  # fmt: skip
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ValueError(f"openai engine: unknown option(s) {', '.join(unknown)}")
        model = opts.get("model") or env.get("OPENAI_MODEL")
        if not model:
            raise ValueError("openai engine: set --engine-opt model=NAME (or OPENAI_MODEL)")
        builtin = BUILTIN_TOOLS if _flag(opts, "builtin_tools", True) else ()
        user_tools = load_tools(opts["tools"]) if opts.get("tools") else []
        window = opts.get("context_window", "unknown")
        return cls(
            base_url=(opts.get("base_url") or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL),
            model=model,
            api_key=opts.get("api_key") or env.get("OPENAI_API_KEY") or None,
            provider=opts.get("provider", "openai"),
            system_prompt=opts.get("system_prompt", DEFAULT_SYSTEM_PROMPT),
            context_window=int(window) if window.isdigit() else window,
            agent_state=opts.get("agent_state", ""),
            connect_timeout=_seconds(opts, "connect_timeout", 10.0),
            read_timeout=_seconds(opts, "timeout", 120.0),
            max_attempts=int(_number(opts, "max_attempts", 5, low=1, high=5)),
            retry_base_ms=int(_number(opts, "retry_base_ms", 2000, low=0)),
            retry_cap_ms=int(_number(opts, "retry_cap_ms", 30000, low=0)),
            retry_after_max_ms=int(_number(opts, "retry_after_max_ms", 60000, low=0)),
            max_turns=int(_number(opts, "max_turns", 50, low=1)),
            replay_reasoning=_flag(opts, "replay_reasoning", True),
            tools=merge_tools(builtin, user_tools),
            temperature=_number(opts, "temperature", None),
            max_tokens=int(v) if (v := _number(opts, "max_tokens", None, low=1)) else None,
        )

    @property
    def chat_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def backoff_ms(self, attempt: int) -> int:
        """The wait after failed attempt ``attempt`` (1-based): base, 2x, 4x ..., capped."""
        return int(min(self.retry_base_ms * 2 ** (attempt - 1), self.retry_cap_ms))

    def retry_wait(self, attempt: int, asked: float | None) -> tuple[int, str]:
        """The milliseconds to wait after failed attempt ``attempt``, and what
        to add to the failure's message: the endpoint's ``asked`` seconds
        (Retry-After) when it said, up to ``retry_after_max_ms``, else the
        backoff ladder."""
        if asked is None:
            return self.backoff_ms(attempt), ""
        wanted = math.ceil(asked * 1000)
        if wanted > self.retry_after_max_ms:
            return self.retry_after_max_ms, (
                f" (the endpoint asked to wait {asked:g} s; waiting at most "
                f"retry_after_max_ms, {self.retry_after_max_ms / 1000:g} s)"
            )
        return wanted, f" (the endpoint asked to wait {asked:g} s)"


def _number(
    opts: Mapping[str, str],
    key: str,
    default: float | None,
    *,
    low: float | None = None,
    high: float | None = None,
) -> float:
    raw = opts.get(key)
    if raw is None:
        return default  # type: ignore[return-value]
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"openai engine: {key}={raw!r} is not a number") from None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"openai engine: {key}={raw!r} must be {bounds}")
    return value


def _seconds(opts: Mapping[str, str], key: str, default: float) -> float:
    # Zero or less would time out every request before its first byte.
    value = _number(opts, key, default)
    if value <= 0:
        raise ValueError(f"openai engine: {key}={opts[key]!r} must be more than 0 seconds")
    return value


def _flag(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"openai engine: {key}={raw!r} must be true or false")
