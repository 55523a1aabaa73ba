"""An agent behind any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

One user message per call (the observation's rendered prompt), sent to ``{base_url}/chat/completions`` with
the official `openai` client (``pip install 'skillrise-gym[bench]'``), one client per agent, so connections
are reused. The API key is read from an environment variable whose *name* is configured (default
``OPENAI_API_KEY``); the key itself is never stored in manifests, records, logs or error messages, and no
other variable supplies it (with none, requests carry no ``Authorization`` header).

Failure handling, per prompt:
- connection failures, timeouts (`timeout_s` per request), HTTP 408/409/429/5xx: retried by the client
  (exponential backoff from 0.5 s up to 8 s with jitter; ``Retry-After`` honoured up to 2 minutes, a longer
  one is not waited for), at most `max_retries` times, and no retry starts once `retry_deadline_s` has
  passed (10 minutes: long enough for a server to restart and load its model); the deadline and `close`
  reach the client's retry loop through httpx event hooks. A body that is not a chat completion (the
  client does not retry a 200) is asked again by the agent (waits from `backoff_s`), within the same
  budget. When the retries are spent, `AgentError` says what failed last (resumable: a rerun goes on).
- other HTTP 4xx (bad key, unknown model, bad request): not retried; `AgentError` with the server's message,
  marked not resumable (the same command would fail the same way).
- `system_prompt`: a system message before each prompt (None: none, the server's chat template decides;
  "" sends an empty one, which stops templates such as SmolLM2's from injecting their own).
- an empty completion (no content at all): asked again `empty_retries` times; if it stays empty it is
  accepted as "" (the env records an invalid, empty action) and tagged ``extra["empty_completion"]``.
Observations of one `act` call are sent concurrently from a thread pool, at most `concurrency` at a time.
`close` stops new requests and retries; a request on the wire ends at its timeout.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from skillrise_gym.agents.base import Agent, AgentError, AgentOutput

RESUMABLE_STATUS = {408, 409, 425, 429}  # and 5xx: a later rerun can succeed


@dataclass
class OpenAIConfig:
    """Settings of the `openai` agent (the CLI flags map to these fields)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 ; "/chat/completions" is appended
    model: str  # the model name the server expects
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable holding the key (may be unset)
    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int = 512  # completion budget per call
    timeout_s: float = 60.0  # per HTTP request (connect, and each read)
    max_retries: int = 100  # extra attempts after the first, for retryable failures (see retry_deadline_s)
    retry_deadline_s: float = 600.0  # no retry of a prompt starts later than this after its first attempt
    backoff_s: float = 1.0  # first wait before re-asking after a malformed body; doubles, at most 8 s
    empty_retries: int = 1  # extra attempts when the completion is empty
    concurrency: int = 4  # requests in flight at once
    seed: int | None = None  # forwarded to servers that accept a sampling seed
    system_prompt: str | None = None  # a system message before each prompt (None: send none)


class _Malformed(Exception):
    """A 200 reply that is not a chat completion."""


@dataclass
class _Call:
    """The attempts of one prompt, seen by the HTTP hooks (which run on the calling thread)."""

    started: float
    retries: int = 0  # retries so far, the client's and the re-asks after malformed bodies
    sent: int = 0  # requests sent by the current client call
    last_error: str = ""
    transport_error: BaseException | None = None  # the current request's failure below HTTP


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
        key = read_api_key(config.api_key_env)
        openai = _import_openai()
        self._openai = openai
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        # the header is set on every request, so neither a placeholder key nor $OPENAI_CUSTOM_HEADERS is sent
        self._headers = {"Authorization": f"Bearer {key}" if key else openai.omit}
        http = openai.DefaultHttpxClient(event_hooks={"request": [self._on_request], "response": [self._on_response]})
        self._client = openai.OpenAI(api_key=key or "no-key", base_url=config.base_url.rstrip("/"),
                                     max_retries=config.max_retries, timeout=openai.Timeout(config.timeout_s),
                                     http_client=http)
        self.batch_size = config.concurrency
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="openai-agent")
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = threading.Event()
        self.stats = {"requests": 0, "retries": 0, "empty_completions": 0}
        self._open = 0  # prompts being answered (requests and the client's waits between them)

    # ----------------------------------------------------------------- public
    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        prompts = [str(o["prompt"]) for o in observations]
        return list(self._pool.map(self.complete, prompts))

    def complete(self, prompt: str) -> AgentOutput:
        """One chat completion for one prompt, with the retry policy of the module docstring."""
        call = _Call(started=time.monotonic())
        empties = 0
        while True:
            try:
                text, usage, finish = self._request(prompt, call)
            except _Malformed as exc:  # the client does not retry a 200: ask again here, within the same budget
                call.last_error = str(exc)
                wait = min(8.0, self.config.backoff_s * 2.0 ** min(call.retries, 10))
                if (call.retries >= self.config.max_retries
                        or time.monotonic() - call.started + wait > self.config.retry_deadline_s):
                    raise self._give_up(call) from None
                call.retries += 1
                self._count("retries")
                if self._closed.wait(wait):
                    raise AgentError("the agent was closed") from None
                continue
            if not text and empties < self.config.empty_retries:
                empties += 1
                self._count("empty_completions")
                continue
            extra: dict[str, Any] = {"finish_reason": finish}
            if call.retries:
                extra["retries"] = call.retries
            if not text:
                extra["empty_completion"] = True
            if not usage:
                extra["usage_missing"] = True
            output = AgentOutput(
                text=text,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                latency_s=time.monotonic() - call.started,
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
        """Stop: queued prompts are cancelled, running ones end at their timeout without retrying; the
        connections are released once none runs."""
        with self._lock:
            self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._release_if_idle()

    # ----------------------------------------------------------------- internals
    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _release_if_idle(self) -> None:
        with self._lock:
            idle = self._closed.is_set() and self._open == 0
        if idle:
            self._client.close()

    def _request(self, prompt: str, call: _Call) -> tuple[str, dict[str, Any], str | None]:
        """One client call (its own retries included): (content, usage, finish_reason); raises _Malformed or
        AgentError."""
        openai, c = self._openai, self.config
        messages = [{"role": "user", "content": prompt}]
        if c.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": c.system_prompt})
        options: dict[str, Any] = {"top_p": c.top_p, "seed": c.seed}
        options = {k: v for k, v in options.items() if v is not None}
        left = c.max_retries - call.retries  # the budget is per prompt, across client calls
        client = self._client if left == c.max_retries else self._client.with_options(max_retries=left)
        with self._lock:
            if self._closed.is_set():  # an interrupted run: no new requests
                raise AgentError("the agent was closed")
            self._open += 1
        self._local.call, call.sent = call, 0
        try:
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=c.model, messages=messages, temperature=c.temperature, max_tokens=c.max_tokens,
                    extra_headers=self._headers, **options)
            finally:
                self._local.call = None
                self._fold(call)
                with self._lock:
                    self._open -= 1
                self._release_if_idle()
        except openai.APIStatusError as exc:
            code = exc.status_code
            call.last_error = f"HTTP {code} {_detail(exc.response)}"
            if code in RESUMABLE_STATUS or code >= 500:
                raise self._give_up(call) from None
            key_hint = f" (check the key in ${c.api_key_env})"
            hint = {401: key_hint, 403: key_hint, 404: " (check --base-url, which usually ends in /v1, and --model)"}
            raise AgentError(f"{self.url}: {call.last_error}{hint.get(code, '')}", resumable=False) from None
        except openai.APIConnectionError as exc:  # APITimeoutError included; the client's retries are spent
            call.last_error = self._transport_message(exc.__cause__ or exc)
            raise self._give_up(call) from None
        except openai.OpenAIError as exc:
            raise AgentError(f"{self.url}: {type(exc).__name__}: {exc}") from None
        try:
            completion = raw.parse()
            choice = completion.choices[0]
            content = choice.message.content
            if content is None:
                content = ""
            if not isinstance(content, str):
                raise TypeError("content is not a string")
            u = completion.usage
            usage = {} if u is None else {k: getattr(u, k, None) for k in ("prompt_tokens", "completion_tokens")}
            return content, usage, getattr(choice, "finish_reason", None)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, openai.APIResponseValidationError) as exc:
            preview = raw.content[:120].decode("utf-8", "replace")
            raise _Malformed(f"malformed response ({type(exc).__name__}: {exc}); body starts {preview!r}") from None

    def _fold(self, call: _Call) -> None:
        """Count the retries the client made in the call that just ended."""
        retried = max(call.sent - 1, 0)
        call.retries, call.sent = call.retries + retried, 0
        with self._lock:
            self.stats["retries"] += retried

    def _give_up(self, call: _Call) -> AgentError:
        attempts = call.retries + max(call.sent, 1)  # `sent`: requests of a client call still running
        spent = time.monotonic() - call.started
        return AgentError(f"{self.url}: giving up after {attempts} attempt(s) in {spent:.0f} s; last error: "
                          f"{call.last_error}")

    def _transport_message(self, exc: BaseException) -> str:
        name = type(exc).__name__  # httpx2's or httpcore2's exception classes
        if "Timeout" in name:
            return f"no answer within {self.config.timeout_s:g} s (timeout)"
        if name == "ConnectError":
            return f"cannot reach the endpoint ({exc})"
        return f"connection failed ({type(exc).__name__}: {exc})"

    # HTTP hooks of the client's httpx client; they run on the thread of the `complete` call they serve
    def _on_request(self, request: Any) -> None:
        call: _Call | None = getattr(self._local, "call", None)
        if call is None:
            return
        if call.sent:  # a retry by the client: not once the agent is closed or the deadline has passed
            if call.transport_error is not None:
                call.last_error = self._transport_message(call.transport_error)
            if self._closed.is_set():
                raise AgentError("the agent was closed")
            if time.monotonic() - call.started >= self.config.retry_deadline_s:
                raise self._give_up(call)
        call.sent += 1
        call.transport_error = None
        request.extensions["trace"] = self._on_trace
        self._count("requests")

    def _on_trace(self, event: str, info: dict[str, Any]) -> None:
        call: _Call | None = getattr(self._local, "call", None)
        if call is not None and event.endswith(".failed") and call.transport_error is None:
            call.transport_error = info.get("exception")

    def _on_response(self, response: Any) -> None:
        call: _Call | None = getattr(self._local, "call", None)
        if call is None or response.status_code < 400:
            return
        response.read()
        call.last_error = f"HTTP {response.status_code} {_detail(response)}"
        wait = _retry_after(response.headers)
        if self._closed.is_set() or time.monotonic() - call.started + wait > self.config.retry_deadline_s:
            response.headers["x-should-retry"] = "false"  # the client raises now instead of waiting for a retry


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


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        from skillrise_gym.backends.base import MissingDependencyError

        raise MissingDependencyError("the openai agent needs the `openai` package: pip install "
                                     "'skillrise-gym[bench]' (or pip install openai)") from exc
    return openai


def _detail(response: Any) -> str:
    """The reason phrase and the server's error message of an HTTP error response (best-effort)."""
    reason = getattr(response, "reason_phrase", "") or ""
    try:
        body = response.text[:300]
    except Exception:  # the body is context only
        body = ""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body.strip()[:200]
    return f"{reason}: {message}" if message else reason


def _retry_after(headers: Any) -> float:
    """The server's Retry-After in seconds (0 when absent or not a number of seconds)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) / scale)
        except (KeyError, ValueError):
            continue
    return 0.0
