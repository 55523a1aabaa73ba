"""A loopback OpenAI-compatible chat server in front of a tiny model built offline, for the agent and bench tests.

`ChatServer` is a stdlib `ThreadingHTTPServer` on 127.0.0.1, port 0, serving ``/v1/chat/completions`` from a
2-layer model. Faults are queued per request (500, 429, a sleep past the client's timeout, malformed JSON,
empty content, 401) or made permanent, and the server can hold requests after the n-th one (to kill a
client mid-run). Hostile replies, for the reliability tests: "drip" (headers, then one byte every `drip_s`
seconds), "deep" (a 200 body of `deep_bytes` "["), "huge" (a valid completion whose content is `huge_bytes`
long), "bomb" (a gzip body that expands to `bomb_bytes`), "echo" (an HTTP 400 or, as "echo200", a 200
malformed body that echoes the request's Authorization header and URL), "redirect" (wait `slow_s`, then an
HTTP 307 back to the same URL: a redirect loop), "echokey" (a valid completion whose content is the request's
query string and Authorization header). Every wait is bounded. The query string of each request is kept in
`queries` (the route ignores it).
Prefill as vLLM does it: with ``continue_final_message`` (and ``add_generation_prompt`` false: both true is
vLLM's HTTP 400) a final assistant message is continued, and the reply's content is the continuation only
(with `echo_prefix`, the prefix and the continuation, as vLLM's ``echo: true``).
The fixtures `chat_server` and `server` (conftest) start one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SECRET = "sk-test-secret-0123456789"
MAX_NEW_TOKENS = 8  # the server's cap on generated tokens per request
HOLD_LIMIT_S = 60.0


class ChatServer:
    """An OpenAI-compatible chat endpoint in front of a real (tiny) causal LM."""

    def __init__(self, model_dir: str | Path) -> None:
        from skillrise_gym.models import load_model_and_tokenizer

        self.model, self.tokenizer = load_model_and_tokenizer(str(model_dir))
        self.faults: deque[str] = deque()  # one fault per coming request
        self.always: str | None = None  # a fault for every request
        self.slow_s = 1.5
        self.drip_s = 1.0  # "drip": seconds between the bytes of the body
        self.deep_bytes = 2**20  # "deep": a 200 body of this many "["
        self.huge_bytes = 50 * 2**20  # "huge": the completion's length in characters
        self.bomb_bytes = 500 * 2**20  # "bomb": what the gzip body expands to
        self.drips: list[float] = []  # when each "drip" reply ended (the client hung up or the limit passed)
        self.retry_after = "0"  # the Retry-After header of a 429
        self.echo_prefix = False  # a continued assistant message: the reply repeats its content before the new text
        self.hold_after: int | None = None  # requests beyond this many wait for `release`
        self.fail_after: int | None = None  # requests beyond this many get HTTP 500
        self.release = threading.Event()
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.queries: list[str] = []  # the query string of each request ("" when none)
        self._lock = threading.Lock()
        self._generate_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> "ChatServer":
        import torch

        # one thread: a tiny model on a shared machine is ~10x faster than with contended threads
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
        import torch

        torch.set_num_threads(self._threads)

    def reset(self) -> None:
        with self._lock:
            self.faults.clear()
            self.always, self.hold_after, self.fail_after = None, None, None
            self.retry_after = "0"
            self.echo_prefix = False
            self.drip_s = 1.0
            self.drips.clear()
            self.release.clear()
            self.requests.clear()
            self.auth.clear()
            self.queries.clear()

    def generate(self, prompt: str, max_new_tokens: int = MAX_NEW_TOKENS,
                 prefix: str = "") -> tuple[str, int, int, str]:
        """The model's greedy completion of one user message: (text, prompt tokens, completion tokens, finish).
        With a `prefix`: the continuation of an assistant message that starts with it (the text leaves it out)."""
        import torch

        messages = [{"role": "user", "content": prompt}]
        if prefix:
            messages.append({"role": "assistant", "content": prefix})
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=not prefix,
                                                  continue_final_message=bool(prefix))
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with self._generate_lock, torch.inference_mode():
            out = self.model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
        new = out[0, ids["input_ids"].shape[1]:].tolist()
        eos = self.tokenizer.eos_token_id
        finish = "stop" if eos in new else "length"
        if eos in new:
            new = new[: new.index(eos)]
        return self.tokenizer.decode(new, skip_special_tokens=True), ids["input_ids"].shape[1], len(new), finish

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length) or b"{}")
        with self._lock:
            self.requests.append(body)
            self.auth.append(handler.headers.get("Authorization"))
            self.queries.append(handler.path.partition("?")[2])
            number = len(self.requests)
            fault = self.faults.popleft() if self.faults else self.always
            if self.fail_after is not None and number > self.fail_after:
                fault = "500"
            hold = self.hold_after is not None and number > self.hold_after
        if hold:
            self.release.wait(HOLD_LIMIT_S)
        if handler.path.partition("?")[0].rstrip("/") != "/v1/chat/completions":
            return self._send(handler, 404, b'{"error": {"message": "not found"}}')
        if fault == "redirect":
            time.sleep(self.slow_s)
            return self._send(handler, 307, b"", {"Location": handler.path})
        if fault == "500":
            return self._send(handler, 500, b'{"error": {"message": "internal error"}}')
        if fault == "429":
            return self._send(handler, 429, b'{"error": {"message": "rate limited"}}',
                              {"Retry-After": self.retry_after})
        if fault == "401":
            return self._send(handler, 401, b'{"error": {"message": "invalid api key"}}')
        if fault == "400":
            return self._send(handler, 400, b'{"error": {"message": "The model nosuch does not exist."}}')
        if fault == "slow":
            time.sleep(self.slow_s)
        if fault == "drip":
            return self._drip(handler)
        if fault == "deep":
            return self._send(handler, 200, b"[" * self.deep_bytes)
        if fault in ("echo", "echo200"):
            echoed = json.dumps({"error": {"message": f"bad request to {handler.path}; you sent Authorization: "
                                                      f"{handler.headers.get('Authorization')}"}}).encode()
            return self._send(handler, 400 if fault == "echo" else 200, echoed[:-2] if fault == "echo200" else echoed)
        if fault == "huge":
            reply = {"id": "chatcmpl-huge", "object": "chat.completion", "model": body.get("model"),
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "x" * self.huge_bytes}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            return self._send(handler, 200, json.dumps(reply).encode())
        if fault == "bomb":
            return self._send(handler, 200, _gzip_zeros(self.bomb_bytes), {"Content-Encoding": "gzip"})
        if fault == "malformed":
            return self._send(handler, 200, b'{"choices": [{"message": {"content": "trunc')
        messages, prefix = body["messages"], ""
        if body.get("continue_final_message"):
            if body.get("add_generation_prompt", True):  # vLLM's default is True: a client must turn it off
                return self._send(handler, 400, b'{"error": {"message": "Cannot set both `continue_final_message` '
                                                b'and `add_generation_prompt` to True."}}')
            if messages[-1]["role"] == "assistant":
                prefix, messages = messages[-1]["content"], messages[:-1]
        prompt = messages[-1]["content"]
        text, prompt_tokens, completion_tokens, finish = self.generate(
            prompt, min(int(body.get("max_tokens", 8)), MAX_NEW_TOKENS), prefix)
        if fault == "empty":
            text, completion_tokens = "", 0
        if fault == "echokey":
            query, auth = handler.path.partition("?")[2], handler.headers.get("Authorization")
            text = f"<action>query {query} auth {auth}</action>"
        if prefix and self.echo_prefix:
            text = prefix + text
        reply = {
            "id": f"chatcmpl-{number}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        self._send(handler, 200, json.dumps(reply).encode())

    def _drip(self, handler: BaseHTTPRequestHandler) -> None:
        """Headers of a 1 MB 200 reply at once, then its body one space every `drip_s` seconds, until the
        client hangs up (or HOLD_LIMIT_S passes)."""
        started = time.monotonic()
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(2**20))
            handler.end_headers()
            handler.wfile.flush()
            while time.monotonic() - started < HOLD_LIMIT_S:
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(self.drip_s)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.drips.append(time.monotonic())
            handler.close_connection = True

    @staticmethod
    def _send(handler, status: int, payload: bytes, headers: dict | None = None) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            for key, value in (headers or {}).items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)



_bombs: dict[int, bytes] = {}


def _gzip_zeros(size: int) -> bytes:
    """A gzip body of `size` zero bytes (made once per size: 500 MB compress to about 500 KB)."""
    if size not in _bombs:
        import zlib

        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = bytes(2**20)
        parts = [packer.compress(block) for _ in range(size // len(block))]
        parts.append(packer.compress(bytes(size % len(block))))
        _bombs[size] = b"".join(parts) + packer.flush()
    return _bombs[size]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
