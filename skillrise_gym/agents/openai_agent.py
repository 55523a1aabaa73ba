"""An agent behind any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

One user message per call (the observation's rendered prompt), POSTed to ``{base_url}/chat/completions``
with the standard library's `urllib` (no client package needed). The API key is read from an environment
variable whose *name* is configured (default ``OPENAI_API_KEY``); the key itself is never stored in
manifests, records, logs or error messages.

Failure handling, per request:
- connection refused / DNS / reset, timeouts, HTTP 429 and 5xx, and bodies that are not the expected JSON:
  retried with exponential backoff and jitter (429 and 503 honour ``Retry-After``) for up to
  `retry_deadline_s` in all (10 minutes: long enough for a server to restart and load its model), at most
  `max_retries` times. When the retries are spent, `AgentError` says what failed last (a rerun resumes).
- other HTTP 4xx (bad key, unknown model, bad request): not retried; `AgentError` with the server's message,
  marked not resumable (the same command would fail the same way).
- `system_prompt`: a system message before each prompt (None: none, the server's chat template decides;
  "" sends an empty one, which stops templates such as SmolLM2's from injecting their own).
- an empty completion (no content at all): asked again `empty_retries` times; if it stays empty it is accepted as "" (the env
  records an invalid, empty action) and tagged ``extra["empty_completion"]``.
Observations of one `act` call are sent concurrently, at most `concurrency` requests at a time.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from skillrise_gym.agents.base import Agent, AgentError, AgentOutput

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 30.0


class _Retryable(Exception):
    """A failure worth another try; `wait_s` is the server's Retry-After, if it gave one."""

    def __init__(self, message: str, wait_s: float | None = None) -> None:
        super().__init__(message)
        self.wait_s = wait_s


@dataclass
class OpenAIConfig:
    """Settings of the `openai` agent (the CLI flags map to these fields)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 ; "/chat/completions" is appended
    model: str  # the model name the server expects
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable holding the key (may be unset)
    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int = 512  # completion budget per call
    timeout_s: float = 60.0  # per HTTP request
    max_retries: int = 100  # extra attempts after the first, for retryable failures (see retry_deadline_s)
    retry_deadline_s: float = 600.0  # retry a failing request for at most this long in all
    backoff_s: float = 1.0  # first backoff; doubles each retry, with jitter, capped at MAX_BACKOFF_S
    empty_retries: int = 1  # extra attempts when the completion is empty
    concurrency: int = 4  # requests in flight at once
    seed: int | None = None  # forwarded to servers that accept a sampling seed
    system_prompt: str | None = None  # a system message before each prompt (None: send none)


class OpenAIAgent(Agent):
    name: ClassVar[str] = "openai"

    def __init__(self, config: OpenAIConfig) -> None:
        if not config.base_url or not config.base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {config.base_url!r}")
        if not config.model:
            raise ValueError("the openai agent needs --model (the model name the server serves)")
        if config.concurrency < 1 or config.max_retries < 0 or config.timeout_s <= 0 or config.retry_deadline_s < 0:
            raise ValueError("concurrency must be >= 1, max_retries >= 0, retry deadline >= 0 and timeout > 0")
        self.config = config
        self._key = read_api_key(config.api_key_env)
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self.batch_size = config.concurrency
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="openai-agent")
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.stats = {"requests": 0, "retries": 0, "empty_completions": 0}
        self._open = 0  # requests in flight

    # ----------------------------------------------------------------- public
    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        prompts = [str(o["prompt"]) for o in observations]
        return list(self._pool.map(self.complete, prompts))

    def complete(self, prompt: str) -> AgentOutput:
        """One chat completion for one prompt, with the retry policy of the module docstring."""
        started = time.monotonic()
        empties = 0
        retries = 0
        last_error = ""
        while True:
            if self._closed.is_set():  # an interrupted run: no new requests, no more retries
                raise AgentError("the agent was closed")
            try:
                text, usage, finish = self._request(prompt)
            except _Retryable as exc:
                last_error = str(exc)
                wait = self._backoff(retries + 1, exc.wait_s)
                spent = time.monotonic() - started
                if retries >= self.config.max_retries or spent + wait > self.config.retry_deadline_s:
                    raise AgentError(
                        f"{self.url}: giving up after {retries + 1} attempt(s) in {spent:.0f} s; last error: "
                        f"{last_error}"
                    ) from None
                retries += 1
                self._count("retries")
                if self._closed.wait(wait):  # an interrupted run stops waiting at once
                    raise AgentError("the agent was closed") from None
                continue
            if not text and empties < self.config.empty_retries:
                empties += 1
                self._count("empty_completions")
                continue
            extra: dict[str, Any] = {"finish_reason": finish}
            if retries:
                extra["retries"] = retries
            if not text:
                extra["empty_completion"] = True
            if not usage:
                extra["usage_missing"] = True
            output = AgentOutput(
                text=text,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                latency_s=time.monotonic() - started,
                extra=extra,
            )
            self._report(output)
            return output

    def describe(self) -> dict[str, Any]:
        c = self.config
        described = {"name": self.name, "base_url": normalize_base_url(c.base_url), "model": c.model,
                     "temperature": c.temperature, "top_p": c.top_p, "max_tokens": c.max_tokens, "seed": c.seed}
        if c.system_prompt is not None:
            described["system_prompt"] = c.system_prompt
        return described

    def in_flight(self) -> int:
        with self._lock:
            return self._open

    def close(self) -> None:
        """Stop: queued requests are cancelled, running ones end at their timeout without retrying."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ----------------------------------------------------------------- internals
    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _backoff(self, attempt: int, server_wait: float | None) -> float:
        base = min(MAX_BACKOFF_S, self.config.backoff_s * 2 ** (attempt - 1))
        wait = base * (0.5 + random.random() / 2)  # jitter spreads out retries of concurrent requests
        if server_wait is not None:
            wait = max(wait, min(server_wait, MAX_BACKOFF_S))
        return wait

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _payload(self, prompt: str) -> bytes:
        c = self.config
        messages = [{"role": "user", "content": prompt}]
        if c.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": c.system_prompt})
        body: dict[str, Any] = {
            "model": c.model,
            "messages": messages,
            "temperature": c.temperature,
            "max_tokens": c.max_tokens,
            "stream": False,
        }
        if c.top_p is not None:
            body["top_p"] = c.top_p
        if c.seed is not None:
            body["seed"] = c.seed
        return json.dumps(body).encode()

    def _request(self, prompt: str) -> tuple[str, dict[str, Any], str | None]:
        """One HTTP round trip: (content, usage, finish_reason); raises _Retryable or AgentError."""
        self._count("requests")
        request = urllib.request.Request(self.url, data=self._payload(prompt), headers=self._headers(), method="POST")
        with self._lock:
            self._open += 1
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            if exc.code in RETRY_STATUS:
                raise _Retryable(f"HTTP {exc.code} {detail}", _retry_after(exc)) from None
            hint = f" (check the key in ${self.config.api_key_env})" if exc.code in (401, 403) else ""
            raise AgentError(f"{self.url}: HTTP {exc.code} {detail}{hint}", resumable=False) from None
        except (TimeoutError, socket.timeout):
            raise _Retryable(f"no answer within {self.config.timeout_s:g} s (timeout)") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise _Retryable(f"no answer within {self.config.timeout_s:g} s (timeout)") from None
            raise _Retryable(f"cannot reach the endpoint ({reason})") from None
        except (ConnectionError, OSError) as exc:  # reset mid-response, broken pipe, incomplete read
            raise _Retryable(f"connection failed ({type(exc).__name__}: {exc})") from None
        finally:
            with self._lock:
                self._open -= 1
        return _parse_completion(raw)


def normalize_base_url(url: str) -> str:
    """The endpoint as runs compare it: scheme and host lower-cased, the loopback names (localhost,
    127.0.0.1, ::1) one name, no trailing slash, so a resume does not fail over how the same server was
    spelled. Credentials in the URL (user:password@) are left out: manifests never hold secrets."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        host = "localhost"
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query, ""))


_warned_missing: set[str] = set()


def read_api_key(name: str) -> str:
    """The API key in the environment variable `name` ('' when `name` is empty: no key wanted).

    Surrounding whitespace (a pasted key's trailing newline) is removed. A key that still holds whitespace,
    control characters or anything outside printable ASCII cannot go in an HTTP header: ValueError names the
    variable and what is wrong, never the key. An unset or empty variable sends requests without a key
    (local servers need none) and warns once per variable name.
    """
    if not name:
        return ""
    key = os.environ.get(name, "").strip()
    if not key:
        if name not in _warned_missing:
            _warned_missing.add(name)
            warnings.warn(f"${name} is unset or empty: requests go without an API key", stacklevel=3)
        return ""
    bad = [c for c in key if not (32 < ord(c) < 127)]
    if bad:
        kind = "whitespace or control characters" if all(ord(c) < 128 for c in bad) else "non-ASCII characters"
        raise ValueError(f"the API key in ${name} holds {kind} ({len(bad)} of {len(key)}); an HTTP header cannot "
                         "carry it: check how the variable was set")
    return key


def _parse_completion(raw: bytes) -> tuple[str, dict[str, Any], str | None]:
    try:
        data = json.loads(raw)
        choice = data["choices"][0]
        message = choice["message"]
        content = message.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise TypeError("content is not a string")
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            usage = {}
        return content, usage, choice.get("finish_reason")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        preview = raw[:120].decode("utf-8", "replace")
        raise _Retryable(f"malformed response ({type(exc).__name__}: {exc}); body starts {preview!r}") from None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read()[:300].decode("utf-8", "replace")
    except Exception:  # the body is best-effort context only
        body = ""
    try:
        message = json.loads(body)["error"]["message"]
        return f"{exc.reason}: {message}"
    except (ValueError, KeyError, TypeError):
        return f"{exc.reason}: {body.strip()[:200]}" if body.strip() else str(exc.reason)


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    value = exc.headers.get("Retry-After") if exc.headers else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
