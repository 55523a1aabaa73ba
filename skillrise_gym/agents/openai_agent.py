"""An agent behind any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

One user message per call (the observation's rendered prompt), sent to ``{base_url}/chat/completions`` with
the official `openai` client (``pip install 'skillrise-gym[bench]'``), one client per agent, so connections
are reused. The API key is read from an environment variable whose *name* is configured (default
``OPENAI_API_KEY``); the key itself is never stored in manifests, records, logs or error messages, and no
other variable supplies it (with none, requests carry no ``Authorization`` header).

Failure handling, per prompt:
- `timeout_s` bounds each request's whole wall time (connect, send, wait for headers and read the whole body:
  a server that drips one byte a second is cut off at the same time as a silent one), not each read, and
  the redirects it follows are part of it (one deadline for all the hops; a hop is no retry).
- connection failures, timeouts, HTTP 408/409/429/5xx: retried by the client
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
- `prefill`: None (the default) sends the prompt alone and the reply is a fresh assistant message, so the agent
  cannot prefill (`can_prefill` False: compact prompts, whose answers start with `answer_prefix`, are refused by
  `base.check_prefill`). "continue": an observation's non-empty ``answer_prefix`` goes as a final assistant
  message, with ``continue_final_message: true, add_generation_prompt: false`` in the body (the request fields
  of vLLM's chat endpoint, which refuses the first without the second turned off: the template leaves that
  message open and the model continues it; `transformers serve` 5.x refuses both fields, HTTP 422);
  the answer is the prefix plus the reply's content (a server that echoes the prefix in its content, as vLLM
  with ``echo: true``, is not doubled: ``extra["prefix_echoed"]``). A server without these fields ignores them
  or refuses them (HTTP 4xx: not retried, not resumable).
- an empty completion (no content at all): asked again `empty_retries` times; if it stays empty it is
  accepted as "" (the env records an invalid, empty action) and tagged ``extra["empty_completion"]``.
- a reply is read to at most `max_reply_bytes` (from the socket, and again after gzip/deflate/br
  decompression); a larger one, or a body nested too deeply to parse, counts as malformed (asked again).
- every error message is redacted: the API key, any ``Bearer ...`` or ``api_key=...``-like value and the
  credentials of a ``user:password@`` URL are replaced by ``***`` (servers that echo headers leak nothing).
- a key in `base_url`'s query string (``?api_key=...``, ``key=``, ``token=``...: `secret_param`) is sent with
  every request and is a secret like the others: `describe` (the manifest) and error messages show ``***``
  for its value. A completion that holds the key or a credential of the URL (`MIN_REPLY_SECRET` characters
  or more) has it replaced by ``***`` before the env and the records get it (``extra["redacted"]``).
- a `base_url` without a usable host or port is a ValueError (one line) when the agent is made.
Observations of one `act` call are sent concurrently from a thread pool, at most `concurrency` at a time.
`close` stops new requests, retries and the client's waits between them; a request on the wire is cut off
within `CLOSE_POLL_S`.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Sequence

from skillrise_gym.agents.base import Agent, AgentError, AgentOutput

RESUMABLE_STATUS = {408, 409, 425, 429}  # and 5xx: a later rerun can succeed
MAX_REPLY_BYTES = 8 * 2**20  # default cap on one reply, raw and decompressed
CLOSE_POLL_S = 0.25  # socket reads wait in slices this long, so `close` and the deadline cut them off
#: the request extension that marks one request of the client: the redirects it follows carry it (one deadline
#: for all the hops), a retry is built afresh without it
ATTEMPT_KEY = "skillrise_attempt"
#: a secret this long or longer (the key, a credential of --base-url) is replaced by *** in completions too
MIN_REPLY_SECRET = 8


@dataclass
class OpenAIConfig:
    """Settings of the `openai` agent (the CLI flags map to these fields)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 ; "/chat/completions" is appended
    model: str  # the model name the server expects
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable holding the key (may be unset)
    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int = 512  # completion budget per call
    timeout_s: float = 60.0  # per HTTP request, in all (connect, send, wait, read the whole body)
    max_retries: int = 100  # extra attempts after the first, for retryable failures (see retry_deadline_s)
    retry_deadline_s: float = 600.0  # no retry of a prompt starts later than this after its first attempt
    backoff_s: float = 1.0  # first wait before re-asking after a malformed body; doubles, at most 8 s
    empty_retries: int = 1  # extra attempts when the completion is empty
    concurrency: int = 4  # requests in flight at once
    seed: int | None = None  # forwarded to servers that accept a sampling seed
    system_prompt: str | None = None  # a system message before each prompt (None: send none)
    max_reply_bytes: int = MAX_REPLY_BYTES  # most bytes read for one reply (raw, and after decompression)
    prefill: str | None = None  # None: cannot prefill; "continue": continue a final assistant message (vLLM)
    chat_template_kwargs: dict[str, Any] | None = None  # sent as the request's chat_template_kwargs (vLLM, transformers serve)


PREFILL_MODES = (None, "continue")
#: the body fields that make a chat endpoint continue the final (assistant) message instead of starting a new one
CONTINUE_FIELDS = {"continue_final_message": True, "add_generation_prompt": False}


class _Malformed(Exception):
    """A 200 reply that is not a chat completion."""


class _Oversized(Exception):
    """A reply longer than `max_reply_bytes` (raised from the socket reads or the decoder)."""


@dataclass
class _Call:
    """The attempts of one prompt, seen by the HTTP hooks (which run on the calling thread)."""

    started: float
    retries: int = 0  # retries so far, the client's and the re-asks after malformed bodies
    sent: int = 0  # requests sent by the current client call
    last_error: str = ""
    transport_error: BaseException | None = None  # the current request's failure below HTTP
    deadline: float = float("inf")  # when the current request must be over (its start + timeout_s)
    attempt: object = None  # the marker of the current request, which its redirects carry (`ATTEMPT_KEY`)
    received: int = 0  # bytes of the current request read from the socket
    decoded: int = 0  # bytes of the current reply after decompression


class OpenAIAgent(Agent):
    name: ClassVar[str] = "openai"
    prefill_flag: ClassVar[str] = "--prefill continue (a server that continues a final assistant message, such as vLLM)"

    def __init__(self, config: OpenAIConfig) -> None:
        if not config.base_url or not config.base_url.startswith(("http://", "https://")):
            raise ValueError(redact(f"--base-url must start with http:// or https://, got {config.base_url!r}",
                                    _url_secrets(config.base_url)))
        check_base_url(config.base_url)
        if not config.model:
            raise ValueError("the openai agent needs --model (the model name the server serves)")
        if (config.concurrency < 1 or config.max_retries < 0 or not 0 < config.timeout_s < math.inf
                or not 0 <= config.retry_deadline_s < math.inf or config.max_reply_bytes < 1):
            raise ValueError("concurrency must be >= 1, max_retries >= 0, retry deadline finite and >= 0, timeout "
                             "finite and > 0 and max_reply_bytes >= 1")
        if config.prefill not in PREFILL_MODES:
            raise ValueError(f"prefill must be None (off) or 'continue', got {config.prefill!r}")
        self.config = config
        key = read_api_key(config.api_key_env)
        openai = _import_openai()
        self._openai = openai
        base, query = _split_query(config.base_url)
        self.url = base.rstrip("/") + "/chat/completions" + (f"?{query}" if query else "")
        self.shown_url = _strip_credentials(self.url)  # what error messages name (no credentials, no query secret)
        self._secrets = [s for s in (key, *_url_secrets(config.base_url)) if s]
        #: what a reply may not carry into the env and the records (long enough not to be ordinary text)
        self._reply_secrets = sorted({s for s in self._secrets if len(s) >= MIN_REPLY_SECRET}, key=len, reverse=True)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = threading.Event()
        # the header is set on every request, so neither a placeholder key nor $OPENAI_CUSTOM_HEADERS is sent
        self._headers = {"Authorization": f"Bearer {key}" if key else openai.omit}
        http = openai.DefaultHttpxClient(event_hooks={"request": [self._on_request], "response": [self._on_response]})
        _bound_sockets(http, self)
        # the query string (a key some servers take there) goes with every request, not into the path
        self._client = _client_class(openai, self._closed)(
            api_key=key or "no-key", base_url=base.rstrip("/"), max_retries=config.max_retries,
            timeout=openai.Timeout(config.timeout_s), http_client=http,
            default_query=dict(_query_pairs(query)) or None)
        self.batch_size = config.concurrency
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="openai-agent")
        self.stats = {"requests": 0, "retries": 0, "empty_completions": 0}
        self._open = 0  # prompts being answered (requests and the client's waits between them)

    # ----------------------------------------------------------------- public
    @property
    def can_prefill(self) -> bool:  # type: ignore[override]
        return self.config.prefill == "continue"

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        prompts = [str(o["prompt"]) for o in observations]
        # an observation's answer prefix is continued only where the server can (prefill "continue")
        prefixes = [str(o.get("answer_prefix") or "") if self.can_prefill else "" for o in observations]
        return _gather([self._pool.submit(self.complete, p, x) for p, x in zip(prompts, prefixes)])

    def complete(self, prompt: str, prefix: str = "") -> AgentOutput:
        """One chat completion for one prompt, with the retry policy of the module docstring. `prefix` (only
        with ``prefill="continue"``): the start of the answer, which the model continues; the text returned
        is the prefix plus the continuation."""
        if prefix and not self.can_prefill:
            raise ValueError("a prefix needs prefill='continue' (--prefill continue)")
        call = _Call(started=time.monotonic())
        empties = 0
        while True:
            try:
                text, usage, finish = self._request(prompt, call, prefix)
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
            echoed = bool(prefix) and text.startswith(prefix)  # a server that repeats the prefix: not doubled
            if echoed:
                text = text[len(prefix):]  # the continuation
            if not text and empties < self.config.empty_retries:
                empties += 1
                self._count("empty_completions")
                continue
            text, redacted = self._redact_reply(text)
            extra: dict[str, Any] = {"finish_reason": finish}
            if redacted:
                extra["redacted"] = redacted
            if echoed:
                extra["prefix_echoed"] = True
            if call.retries:
                extra["retries"] = call.retries
            if not text:
                extra["empty_completion"] = True
            if not usage:
                extra["usage_missing"] = True
            output = AgentOutput(
                text=prefix + text,
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
        if c.prefill is not None:  # absent when off, so runs recorded before the setting existed still resume
            described["prefill"] = c.prefill
        if c.chat_template_kwargs:
            described["chat_template_kwargs"] = dict(c.chat_template_kwargs)
        return described

    def framing(self) -> dict[str, Any]:
        c = self.config
        return {"max_new_tokens": c.max_tokens, "system_prompt": c.system_prompt,
                "chat_template_kwargs": dict(c.chat_template_kwargs or {})}

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

    def _request(self, prompt: str, call: _Call, prefix: str = "") -> tuple[str, dict[str, Any], str | None]:
        """One client call (its own retries included): (content, usage, finish_reason); raises _Malformed or
        AgentError. A `prefix` goes as a final assistant message that the server continues (`CONTINUE_FIELDS`)."""
        openai, c = self._openai, self.config
        messages = [{"role": "user", "content": prompt}]
        if c.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": c.system_prompt})
        options: dict[str, Any] = {"top_p": c.top_p, "seed": c.seed}
        extra: dict[str, Any] = {}
        if prefix:
            messages.append({"role": "assistant", "content": prefix})
            extra.update(CONTINUE_FIELDS)
        if c.chat_template_kwargs:  # the trained policy's template arguments (e.g. enable_thinking)
            extra["chat_template_kwargs"] = dict(c.chat_template_kwargs)
        if extra:
            options["extra_body"] = extra
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
        except _Oversized as exc:
            raise _Malformed(str(exc)) from None
        except openai.APIStatusError as exc:
            code = exc.status_code
            call.last_error = f"HTTP {code} {_detail(exc.response)}"
            if code in RESUMABLE_STATUS or code >= 500:
                raise self._give_up(call) from None
            key_hint = f" (check the key in ${c.api_key_env})"
            hint = {401: key_hint, 403: key_hint, 404: " (check --base-url, which usually ends in /v1, and --model)"}
            raise self._error(f"{self.shown_url}: {call.last_error}{hint.get(code, '')}", resumable=False) from None
        except openai.APIConnectionError as exc:  # APITimeoutError included; the client's retries are spent
            call.last_error = self._transport_message(exc.__cause__ or exc)
            raise self._give_up(call) from None
        except openai.OpenAIError as exc:
            raise self._error(f"{self.shown_url}: {type(exc).__name__}: {exc}") from None
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
        except RecursionError:
            raise _Malformed("malformed response (JSON nested too deeply to parse)") from None
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, openai.APIResponseValidationError) as exc:
            preview = raw.content[:120].decode("utf-8", "replace")
            raise _Malformed(f"malformed response ({type(exc).__name__}: {str(exc)[:300]}); body starts "
                             f"{preview!r}") from None

    def _fold(self, call: _Call) -> None:
        """Count the retries the client made in the call that just ended."""
        retried = max(call.sent - 1, 0)
        call.retries, call.sent = call.retries + retried, 0
        with self._lock:
            self.stats["retries"] += retried

    def _give_up(self, call: _Call) -> AgentError:
        attempts = call.retries + max(call.sent, 1)  # `sent`: requests of a client call still running
        spent = time.monotonic() - call.started
        return self._error(f"{self.shown_url}: giving up after {attempts} attempt(s) in {spent:.0f} s; last error: "
                           f"{call.last_error}")

    def _redact_reply(self, text: str) -> tuple[str, int]:
        """A completion with the key and the credentials of --base-url (those of `MIN_REPLY_SECRET` characters or
        more) replaced by ``***``, and how many were (a server that echoes them must not put them in records)."""
        count = 0
        for secret in self._reply_secrets:
            found = text.count(secret)
            if found:
                count += found
                text = text.replace(secret, "***")
        return text, count

    def _error(self, message: str, resumable: bool = True) -> AgentError:
        """An AgentError whose message holds no secret (see `redact`)."""
        return AgentError(redact(message, self._secrets), resumable=resumable)

    def _time_left(self, timeout: float | None, expired: type[Exception]) -> float | None:
        """Seconds the current request may still take (at most `timeout`); raises `expired` past its deadline.
        Outside a request (no call on this thread): `timeout` as it is."""
        call: _Call | None = getattr(self._local, "call", None)
        if call is None or call.deadline == float("inf"):
            return timeout
        left = call.deadline - time.monotonic()
        if left <= 0:
            raise expired(f"the request took longer than {self.config.timeout_s:g} s in all")
        return left if timeout is None else min(timeout, left)

    def _transport_message(self, exc: BaseException) -> str:
        name = type(exc).__name__  # httpx2's or httpcore2's exception classes
        if "Timeout" in name:
            return f"no complete answer within {self.config.timeout_s:g} s (timeout)"
        if name == "ConnectError":
            return f"cannot reach the endpoint ({str(exc)[:300]})"
        return f"connection failed ({type(exc).__name__}: {str(exc)[:300]})"

    # HTTP hooks of the client's httpx client; they run on the thread of the `complete` call they serve
    def _on_request(self, request: Any) -> None:
        call: _Call | None = getattr(self._local, "call", None)
        if call is None:
            return
        if call.attempt is not None and request.extensions.get(ATTEMPT_KEY) is call.attempt:
            # a redirect of the current request (httpx copies its extensions): the same request, under its
            # deadline, not a retry
            if self._closed.is_set():
                raise AgentError("the agent was closed")
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
        call.deadline, call.received, call.decoded = time.monotonic() + self.config.timeout_s, 0, 0
        call.attempt = request.extensions[ATTEMPT_KEY] = object()
        request.extensions["trace"] = self._on_trace
        self._count("requests")

    def _on_trace(self, event: str, info: dict[str, Any]) -> None:
        call: _Call | None = getattr(self._local, "call", None)
        if call is not None and event.endswith(".failed") and call.transport_error is None:
            call.transport_error = info.get("exception")

    def _on_response(self, response: Any) -> None:
        call: _Call | None = getattr(self._local, "call", None)
        if call is None:
            return
        try:  # the body is decoded through a counter: a gzip bomb stops at max_reply_bytes
            response._decoder = _CappedDecoder(response._get_content_decoder(), call, self.config.max_reply_bytes)
        except AttributeError:  # pragma: no cover - an httpx2 without a decoder hook: the raw cap still holds
            pass
        if response.status_code < 400:
            return
        response.read()
        call.last_error = f"HTTP {response.status_code} {_detail(response)}"
        wait = _retry_after(response.headers)
        if self._closed.is_set() or time.monotonic() - call.started + wait > self.config.retry_deadline_s:
            response.headers["x-should-retry"] = "false"  # the client raises now instead of waiting for a retry


def _gather(futures: list[Future]) -> list[AgentOutput]:
    """The futures' results in order, as `Executor.map` gives them (the first failure raised as soon as its
    future is done; the futures not yet started are cancelled on any exception, KeyboardInterrupt included),
    but waited for in slices of `CLOSE_POLL_S`: between slices the calling (main) thread runs Python again, so
    a signal whose C handler ran on another thread, or just before the wait began, acts within a slice. A
    wait without a timeout would hold it until every request ended (up to `timeout_s` and its retries)."""
    results = []
    try:
        for future in futures:
            while not future.done():
                wait_futures([future], timeout=CLOSE_POLL_S)
            results.append(future.result())
        return results
    finally:
        for future in futures:
            future.cancel()


def normalize_base_url(url: str) -> str:
    """The endpoint as runs compare it: scheme and host lower-cased, the loopback names (localhost,
    127.0.0.1, ::1) one name, no trailing slash, so a resume does not fail over how the same server was
    spelled. Credentials in the URL (user:password@) are left out and the values of secret-like query
    parameters (``api_key=``, ``key=``, ``token=``...: `secret_param`) become ``***``: manifests never hold
    secrets, and a resume with another key is the same run."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        host = "localhost"
    netloc = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:  # not a port (refused when an agent is made): kept as written
        port = parts.netloc.rpartition(":")[2]
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), _redact_query(parts.query), ""))


#: query parameters of --base-url whose values are secrets (never recorded, shown, or echoed in records)
_SECRET_PARAM = re.compile(r"(?i)(key|token|secret|pass|pwd|auth|sig|cred|session|code)")


def secret_param(name: str) -> bool:
    """Whether a query parameter of --base-url holds a secret (its name says key, token, secret, password, auth,
    signature, credential, session or code)."""
    return bool(_SECRET_PARAM.search(name))


def _redact_query(query: str) -> str:
    """A query string with the values of its secret parameters replaced by ``***`` (the rest as written)."""
    from urllib.parse import unquote_plus

    parts = []
    for item in query.split("&") if query else []:
        name, sep, value = item.partition("=")
        parts.append(f"{name}=***" if sep and value and secret_param(unquote_plus(name)) else item)
    return "&".join(parts)


def _split_query(url: str) -> tuple[str, str]:
    """(the URL without its query string and fragment, the query string)."""
    head, _, rest = url.strip().partition("?")
    return head.partition("#")[0], rest.partition("#")[0]


def _query_pairs(query: str) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl

    return parse_qsl(query, keep_blank_values=True)


def check_base_url(url: str) -> None:
    """ValueError (one line, no secret in it) unless `url` has a host and a port a connection can use."""
    import ipaddress
    from urllib.parse import urlsplit

    shown = _strip_credentials(url.strip())

    def bad(reason: str) -> ValueError:
        return ValueError(redact(f"--base-url {shown!r}: {reason}", _url_secrets(url)))

    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url.strip()):
        raise bad("a URL holds no spaces or control characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise bad(f"not a usable URL ({exc}); a port is a number from 1 to 65535") from None
    host = parts.hostname or ""
    if not host:
        raise bad("no host (expected e.g. http://127.0.0.1:8000/v1)")
    if port == 0:
        raise bad("port 0 cannot be connected to; a port is a number from 1 to 65535")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise bad(f"{host!r} is not an IPv6 address") from None
    elif not all(c.isalnum() or c in "-._~%" for c in host):
        raise bad(f"{host!r} is not a host name")


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
        message = str(response.json()["error"]["message"])[:200]
    except (ValueError, KeyError, TypeError, RecursionError):
        message = body.strip()[:200]
    return f"{reason}: {message}" if message else reason


_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=:-]+")
_KEY_VALUE = re.compile(r"(?i)((?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd|"
                        r"authorization|x-api-key)[\"']?\s*[:=]\s*[\"']?)(?!(?:bearer|basic|token)\b|\*\*\*)"
                        r"([^\s\"'&,;}]+)")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every secret replaced by ``***``: the given `secrets` (the API key, URL credentials),
    ``Bearer``/``Basic`` credentials, ``api_key=``/``"authorization": ...``-like values, ``sk-...`` keys and
    the ``user:password@`` part of URLs."""
    text = _URL_USERINFO.sub(r"\1***@", text)
    text = _BEARER.sub(r"\1\2***", text)
    text = _KEY_VALUE.sub(r"\1***", text)
    text = _SK_KEY.sub("sk-***", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _url_secrets(url: str) -> list[str]:
    """The user name and password of a URL (as written and percent-decoded); none when it has none."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url.strip())
        found = [parts.username, parts.password]
    except ValueError:
        found = []
    for item in _split_query(url)[1].split("&"):  # the values of secret query parameters, as written and decoded
        name, sep, value = item.partition("=")
        if sep and secret_param(unquote(name.replace("+", " "))):
            found += [value, unquote(value.replace("+", " "))]
    return [v for s in found if s for v in {s, unquote(s)} if len(v) >= 3]


def _strip_credentials(url: str) -> str:
    """`url` without its ``user:password@`` part, and with its secret query values as ``***``."""
    url = _URL_USERINFO.sub(r"\1", url)
    head, sep, rest = url.partition("?")
    if not sep:
        return url
    query, hash_sep, fragment = rest.partition("#")
    return f"{head}?{_redact_query(query)}{hash_sep}{fragment}"


class _CappedDecoder:
    """Wraps an httpx2 content decoder: counts the decoded bytes of one reply, raises `_Oversized` past the cap."""

    def __init__(self, inner: Any, call: _Call, cap: int) -> None:
        self.inner, self.call, self.cap = inner, call, cap

    def _count(self, chunks: Any) -> Iterator[bytes]:
        for chunk in ([chunks] if isinstance(chunks, bytes) else chunks):  # httpx2's decoders yield chunks
            self.call.decoded += len(chunk)
            if self.call.decoded > self.cap:
                raise _Oversized(f"malformed response (longer than {self.cap} bytes once decompressed)")
            yield chunk

    def decode(self, data: bytes) -> Iterator[bytes]:
        return self._count(self.inner.decode(data))

    def flush(self) -> Iterator[bytes]:
        return self._count(self.inner.flush())


def _bound_sockets(http: Any, agent: "OpenAIAgent") -> None:
    """Put `_BoundedBackend` under every connection pool of the httpx2 client `http` (its transport and any
    proxy mounts), so each request's whole wall time and size are bounded at the socket."""
    transports = [getattr(http, "_transport", None), *getattr(http, "_mounts", {}).values()]
    pools = [getattr(t, "_pool", None) for t in transports if t is not None]
    pools = [p for p in pools if p is not None and hasattr(p, "_network_backend")]
    if not pools:  # pragma: no cover - guards an httpx2 upgrade (the bench pins openai and with it httpx2)
        raise RuntimeError("this httpx2 has no connection pool to bound; pin openai>=3.60,<3.61")
    for pool in pools:
        pool._network_backend = _BoundedBackend(pool._network_backend, agent)


class _BoundedBackend:
    """An httpcore2 network backend whose streams read, write and connect only until the current request's
    deadline (`_Call.deadline`, on the calling thread), in slices of `CLOSE_POLL_S` so `close` cuts them off,
    and count the bytes read against `max_reply_bytes`."""

    def __init__(self, inner: Any, agent: "OpenAIAgent") -> None:
        self.inner, self.agent = inner, agent

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kwargs: Any) -> "_BoundedStream":
        import httpcore2

        left = self.agent._time_left(timeout, httpcore2.ConnectTimeout)
        return _BoundedStream(self.inner.connect_tcp(host, port, timeout=left, **kwargs), self.agent)

    def connect_unix_socket(self, path: str, timeout: float | None = None, **kwargs: Any) -> "_BoundedStream":
        import httpcore2

        left = self.agent._time_left(timeout, httpcore2.ConnectTimeout)
        return _BoundedStream(self.inner.connect_unix_socket(path, timeout=left, **kwargs), self.agent)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _BoundedStream:
    """One connection's stream under `_BoundedBackend`."""

    def __init__(self, inner: Any, agent: "OpenAIAgent") -> None:
        self.inner, self.agent = inner, agent

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        import httpcore2

        while True:
            if self.agent._closed.is_set():
                raise AgentError("the agent was closed")
            left = self.agent._time_left(timeout, httpcore2.ReadTimeout)
            try:
                data = self.inner.read(max_bytes, CLOSE_POLL_S if left is None else min(left, CLOSE_POLL_S))
            except httpcore2.ReadTimeout:
                continue  # a slice ended: check close and the deadline, then wait on
            call = getattr(self.agent._local, "call", None)
            if call is not None:
                call.received += len(data)
                if call.received > self.agent.config.max_reply_bytes:
                    raise _Oversized(f"malformed response (longer than {self.agent.config.max_reply_bytes} bytes)")
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        import httpcore2

        self.inner.write(buffer, self.agent._time_left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        import httpcore2

        left = self.agent._time_left(timeout, httpcore2.ConnectTimeout)
        return _BoundedStream(self.inner.start_tls(ssl_context, server_hostname, left), self.agent)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


def _client_class(openai: Any, closed: threading.Event) -> type:
    """The openai client class whose waits between retries end as soon as `closed` is set (the client's own
    wait is a plain sleep, up to 2 minutes for a Retry-After)."""

    class Client(openai.OpenAI):
        def _sleep_for_retry(self, *, retries_taken: int, max_retries: int, options: Any, response: Any) -> None:
            headers = response.headers if response is not None else None
            closed.wait(self._calculate_retry_timeout(max_retries - retries_taken, options, headers))

    return Client


def _retry_after(headers: Any) -> float:
    """The server's Retry-After in seconds (0 when absent or not a number of seconds)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) / scale)
        except (KeyError, ValueError):
            continue
    return 0.0
