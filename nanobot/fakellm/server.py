"""A real local HTTP server that speaks the OpenAI and Anthropic wire protocols.

Tests point the official SDKs at it, so the real client code paths (HTTP, SSE parsing, retries,
error mapping) run against scripted answers. Every request is recorded and checked against the
message rules in `rules.py`; a test asserts `server.assert_all_valid()` to prove that nothing the
product sent would have been rejected by a real provider.

    with FakeLLMServer() as server:
        server.script(Reply.tool_calls([("read_file", {"path": "a"})]), Reply.text("done"))
        client = AsyncOpenAI(base_url=server.openai_base_url, api_key="x")
        ...
        server.assert_all_valid()
"""

from __future__ import annotations

import collections
import itertools
import json
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from nanobot.fakellm import replies as wire
from nanobot.fakellm import summariser
from nanobot.fakellm.replies import Reply, Usage
from nanobot.fakellm.rules import check_anthropic_request, check_openai_messages, estimate_tokens

__all__ = ["FakeLLMServer", "RecordedRequest", "Answer"]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
MODELS_PATH = "/v1/models"


@dataclass
class RecordedRequest:
    """One request as the server received it, with the rule violations found in it."""

    index: int
    protocol: str  # "openai" | "anthropic"
    path: str
    headers: dict[str, str]  # keys lower-cased, so lookups don't depend on the client's casing
    body: dict
    messages: list
    system: Any
    tools: list | None
    tool_choice: Any
    stream: bool
    violations: list[str]
    estimated_tokens: int
    unscripted: bool = False
    t_received: float = 0.0
    t_answered: float | None = None
    reply: Reply | None = field(default=None, repr=False)  # what was served, for debugging
    usage: Usage | None = None  # the token counts the answer reported (None: no answer was sent)


Responder = Callable[[RecordedRequest], Reply | None]  # None: answered "ok", marked unscripted


class _Cut(Exception):
    """Raised inside the handler to drop the connection on purpose."""


class FakeLLMServer:
    """Scripted fake of the OpenAI and Anthropic APIs on 127.0.0.1, on a background thread.

    Replies queued with `script()` are served in arrival order whatever the protocol; when the
    queue is empty `responder(request)` is asked, and failing that the answer is "ok" and the
    request is marked `unscripted`.

    `strict=True` makes it answer like the strictest real provider: a request with any rule
    violation (e.g. one ending with an assistant message) gets a 400 instead of a reply.
    """

    def __init__(
        self,
        context_window: int | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        strict: bool = False,
    ) -> None:
        self.context_window = context_window
        self.strict = strict
        # how a prompt is sized for the window check (default: JSON characters / 4); tests can give
        # a real tokenizer (rules.count_prompt_tokens), and ask that max_tokens fit too, as strict APIs do
        self.prompt_counter: Callable[[dict], int] | None = None
        self.count_max_tokens = False
        self.responder: Responder | None = None
        # answer consolidation requests (tools: save_memory) itself, before the responder: a summary,
        # MEMORY.md kept, and a session_checkpoint filled from the request (fakellm/summariser.py)
        self.summarise = False
        self.models: list[str] = ["test-model", "claude-test"]  # what GET /v1/models lists
        self.model_requests: list[str] = []  # paths of the GET /v1/models... requests received
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: collections.deque[Reply] = collections.deque()
        self._requests: list[RecordedRequest] = []
        # Tool-call ids stay unique for the server's lifetime (not reset by `reset()`), because a
        # client may keep a history across resets and duplicate ids would be a false violation.
        self._call_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()  # open client connections, closed by stop()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeLLMServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _QuietServer((self._host, self._port), _Handler)
        httpd.daemon_threads = True
        httpd.timeout = 0  # handle_request() is called when a connection waits: never block in it
        httpd.fake = self  # type: ignore[attr-defined]
        self._httpd = httpd
        # stop() wakes the serving thread through this pair, so it sleeps until a connection or a
        # stop comes (serve_forever notices a stop only between polls: a short poll woke an idle
        # server 200 times a second, about 1% of a core; a long one made stopping slow)
        self._wake = wake = socket.socketpair()
        self._thread = threading.Thread(
            target=self._accept, args=(httpd, wake[0]), name="fakellm", daemon=True
        )
        self._thread.start()
        return self

    def _accept(self, httpd: ThreadingHTTPServer, wake: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(httpd, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is httpd and not self._stopping.is_set():
                        httpd.handle_request()  # a connection is waiting: accepted at once

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a reply's delay, and ends _accept
        wake, self._wake = self._wake, None
        if wake is not None:
            wake[1].send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if wake is not None:
            for end in wake:
                end.close()
        httpd.server_close()
        # Pooled keep-alive connections would otherwise keep handler threads (and a client's
        # idea that the server is up) alive after stop().
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    # ------------------------------------------------------------------ scripting and inspection

    def script(self, *replies: Reply) -> None:
        for reply in replies:
            if not isinstance(reply, Reply):
                raise TypeError(f"script() takes Reply objects, got {type(reply).__name__}")
        with self._lock:
            self._queue.extend(replies)

    @property
    def queued(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the recorded requests, in arrival order."""
        with self._lock:
            return list(self._requests)

    def violations(self) -> list[str]:
        return [f"request {r.index}: {v}" for r in self.requests for v in r.violations]

    def assert_all_valid(self) -> None:
        found = self.violations()
        if found:
            raise AssertionError("fake LLM saw invalid requests:\n  " + "\n  ".join(found))

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self._requests) >= n, timeout=timeout)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._requests.clear()

    # ------------------------------------------------------------------ in process, without HTTP

    def answer(self, path: str, headers: dict[str, str], body: dict) -> Answer:
        """Record and answer one POST exactly as the HTTP server would (same rules, script, window
        and strictness), for a client in this process (tests' in-process transport). Blocks for
        the reply's delay: call it from a thread."""
        protocol = {OPENAI_PATH: "openai", ANTHROPIC_PATH: "anthropic"}.get(
            urlsplit(path).path.rstrip("/")
        )
        out = Answer()
        if protocol is None:
            out.send_json(404, wire.error_body("openai", 404, f"fake LLM has no route {path}"))
            return out
        out.rec = self._record(protocol, path, {k.lower(): v for k, v in headers.items()}, body)
        try:
            self._serve(out, out.rec)
        except _Cut:
            out.cut = True
        finally:
            out._mark_answered()
        return out

    # ------------------------------------------------------------------ request handling

    def _record(self, protocol: str, path: str, headers: dict, body: dict) -> RecordedRequest:
        if protocol == "openai":
            messages = body.get("messages")
            system = None
            violations = check_openai_messages(messages)
            prompt = {"messages": messages}
        else:
            messages = body.get("messages")
            system = body.get("system")
            violations = check_anthropic_request(system, messages)
            if "max_tokens" not in body:
                violations.append("max_tokens is required by the Anthropic API")
            prompt = {"system": system, "messages": messages}
        if not body.get("model"):
            violations.append("model is missing")
        tools, tool_choice = body.get("tools"), body.get("tool_choice")
        violations += _check_tool_choice(protocol, tools, tool_choice)
        if tools:
            prompt["tools"] = tools
        tokens = (
            self.prompt_counter(prompt)
            if self.prompt_counter is not None
            else estimate_tokens(prompt)
        )
        if self.context_window is not None and self._needed(tokens, body) > self.context_window:
            violations.append(
                f"context window exceeded: estimated {tokens} tokens"
                + (f" + max_tokens {body.get('max_tokens')}" if self.count_max_tokens else "")
                + f" > {self.context_window}"
            )
        with self._arrived:
            rec = RecordedRequest(
                index=len(self._requests),
                protocol=protocol,
                path=path,
                headers=headers,
                body=body,
                messages=messages if isinstance(messages, list) else [],
                system=system,
                tools=tools,
                tool_choice=tool_choice,
                stream=bool(body.get("stream")),
                violations=violations,
                estimated_tokens=tokens,
                t_received=time.monotonic(),
            )
            # The reply is taken at arrival, so concurrent requests get replies in arrival order.
            # An over-long prompt is rejected like a real API and leaves the script untouched,
            # so the reply meant for the retry after consolidation is still there.
            if not self._exceeds_window(rec) and not self._rejects(rec) and self._queue:
                rec.reply = self._queue.popleft()
            self._requests.append(rec)
            self._arrived.notify_all()
        return rec

    def _needed(self, tokens: int, body: dict) -> int:
        reply = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        return tokens + (reply if self.count_max_tokens and isinstance(reply, int) else 0)

    def _rejects(self, rec: RecordedRequest) -> bool:
        return self.strict and bool(rec.violations)

    def _exceeds_window(self, rec: RecordedRequest) -> bool:
        return (
            self.context_window is not None
            and self._needed(rec.estimated_tokens, rec.body) > self.context_window
        )

    def _choose_reply(self, rec: RecordedRequest) -> Reply:
        if rec.reply is not None:
            return rec.reply
        responder = self.responder
        reply = None
        if self.summarise and summariser.is_consolidation(rec):
            reply = rec.reply = summariser.save_memory_reply(rec)
            return reply
        if responder is not None:
            try:
                reply = responder(rec)
            except Exception as e:  # surfaced through violations(), since a thread can't raise
                rec.violations.append(f"responder raised {type(e).__name__}: {e}")
                reply = Reply.error(500, message=f"fake responder failed: {e}")
        if reply is None:
            reply = Reply.text("ok")
            rec.unscripted = True
        rec.reply = reply
        return reply

    def _new_ids(self, protocol: str, reply: Reply) -> list[str]:
        prefix = "call_" if protocol == "openai" else "toolu_"
        with self._lock:
            return [c.id or f"{prefix}{next(self._call_ids)}" for c in reply.calls]

    def _serve(self, handler: _Handler | Answer, rec: RecordedRequest) -> None:
        if self._exceeds_window(rec):
            if rec.protocol == "openai":
                msg = (
                    f"This model's maximum context length is {self.context_window} tokens. "
                    f"However, your messages resulted in {rec.estimated_tokens} tokens. "
                    "Please reduce the length of the messages. (context length exceeded)"
                )
                body = wire.error_body("openai", 400, msg, code="context_length_exceeded")
            else:
                msg = (
                    f"prompt is too long: {rec.estimated_tokens} tokens > "
                    f"{self.context_window} maximum (context length exceeded)"
                )
                body = wire.error_body("anthropic", 400, msg)
            handler.send_json(400, body)
            return
        if self._rejects(rec):
            message = "invalid request: " + "; ".join(rec.violations)
            handler.send_json(400, wire.error_body(rec.protocol, 400, message))
            return

        reply = self._choose_reply(rec)
        if reply.delay > 0 and self._stopping.wait(reply.delay):
            raise _Cut()
        if reply.kind == "error":
            extra = {}
            if reply.retry_after is not None:
                extra["Retry-After"] = str(reply.retry_after)
            handler.send_json(
                reply.status,
                wire.error_body(rec.protocol, reply.status, reply.message, reply.error_type),
                extra,
            )
            return
        if reply.kind == "cut" and not rec.stream:
            raise _Cut()

        model = str(rec.body.get("model") or "fake-model")
        ids = self._new_ids(rec.protocol, reply)
        usage = Usage.for_reply(reply, rec.estimated_tokens)
        rec.usage = usage
        cut = reply.kind == "cut"
        if rec.protocol == "openai":
            response_id = f"chatcmpl-fake{rec.index}"
            if not rec.stream:
                handler.send_json(
                    200,
                    wire.openai_response(
                        reply, model=model, ids=ids, usage=usage, response_id=response_id
                    ),
                )
                return
            opts = rec.body.get("stream_options") or {}
            handler.start_sse()
            for chunk in wire.openai_stream(
                reply,
                model=model,
                ids=ids,
                usage=usage,
                response_id=response_id,
                cut=cut,
                include_usage=bool(opts.get("include_usage")),
            ):
                handler.send_sse(None, chunk)
                if reply.pace > 0 and self._stopping.wait(reply.pace):
                    raise _Cut()
            if cut:
                raise _Cut()
            handler._mark_answered()
            handler.send_sse_raw(b"data: [DONE]\n\n")
            handler.end_sse()
        else:
            message_id = f"msg_fake{rec.index}"
            if not rec.stream:
                handler.send_json(
                    200,
                    wire.anthropic_response(
                        reply, model=model, ids=ids, usage=usage, message_id=message_id
                    ),
                )
                return
            handler.start_sse()
            for event, data in wire.anthropic_stream(
                reply, model=model, ids=ids, usage=usage, message_id=message_id, cut=cut
            ):
                if event == "message_stop":
                    handler._mark_answered()
                handler.send_sse(event, data)
                if reply.pace > 0 and self._stopping.wait(reply.pace):
                    raise _Cut()
            if cut:
                raise _Cut()
            handler.end_sse()


def _sse_event(event: str | None, data: dict) -> bytes:
    return ((f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n").encode()


class Answer:
    """What `_serve` wrote for one request, kept in memory: status, headers and body bytes (SSE
    events already framed), and whether the connection would have been dropped (`cut`)."""

    def __init__(self) -> None:
        self.status = 200
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.cut = False
        self.rec: RecordedRequest | None = None

    @property
    def content(self) -> bytes:
        return b"".join(self.chunks)

    def _mark_answered(self) -> None:
        if self.rec is not None and self.rec.t_answered is None:
            self.rec.t_answered = time.monotonic()

    def send_json(self, status: int, body: dict, headers: dict | None = None) -> None:
        self.status = status
        self.headers = {
            "content-type": "application/json",
            **{k.lower(): v for k, v in (headers or {}).items()},
        }
        self._mark_answered()
        self.chunks.append(wire.encode_body(body))

    def start_sse(self) -> None:
        self.headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
        }

    def send_sse(self, event: str | None, data: dict) -> None:
        self.send_sse_raw(_sse_event(event, data))

    def send_sse_raw(self, data: bytes) -> None:
        self.chunks.append(data)

    def end_sse(self) -> None:
        self._mark_answered()


def _check_tool_choice(protocol: str, tools: Any, choice: Any) -> list[str]:
    """A forced tool choice must name a declared tool; both APIs reject it otherwise."""
    if choice is None:
        return []
    names = {
        (t.get("function") or {}).get("name") if protocol == "openai" else t.get("name")
        for t in tools or []
        if isinstance(t, dict)
    }
    if protocol == "openai":
        if not tools and choice != "none":
            return ["tool_choice is set but no tools are declared"]
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if name not in names:
                return [f"tool_choice names undeclared tool {name!r}"]
        return []
    if isinstance(choice, dict) and choice.get("type") == "tool":
        if choice.get("name") not in names:
            return [f"tool_choice names undeclared tool {choice.get('name')!r}"]
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool") and not tools:
        return ["tool_choice forces a tool but no tools are declared"]
    return []


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client killed mid-request (crash tests do this on purpose) is not a server error
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real APIs; the SDKs pool connections
    server_version = "fakellm/1"
    _rec: RecordedRequest | None = None

    def setup(self) -> None:
        super().setup()
        # Real APIs flush each SSE event at once; with Nagle on, the many small writes of a stream
        # wait for the client's delayed ACK (~40 ms), which measurements would blame on the client.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fake: FakeLLMServer = self.server.fake  # type: ignore[attr-defined]
        with fake._lock:
            fake._conns.add(self.connection)

    def finish(self) -> None:
        fake: FakeLLMServer = self.server.fake  # type: ignore[attr-defined]
        with fake._lock:
            fake._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the socket was already cut on purpose

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # keeps test output clean; requests are recorded instead

    # ---------------------------------------------------------- routing

    def do_GET(self) -> None:  # noqa: N802
        fake: FakeLLMServer = self.server.fake  # type: ignore[attr-defined]
        path = urlsplit(self.path).path.rstrip("/")
        if path == MODELS_PATH:  # OpenAI's list (Anthropic's has the same path and data key)
            fake.model_requests.append(path)
            self.send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": m, "object": "model", "type": "model"} for m in fake.models],
                },
            )
            return
        if path.startswith(MODELS_PATH + "/"):
            fake.model_requests.append(path)
            model = path[len(MODELS_PATH) + 1 :]
            if model in fake.models:
                self.send_json(
                    200, {"id": model, "object": "model", "type": "model", "display_name": model}
                )
                return
        self._not_found()

    def do_POST(self) -> None:  # noqa: N802
        fake: FakeLLMServer = self.server.fake  # type: ignore[attr-defined]
        path = urlsplit(self.path).path.rstrip("/")
        protocol = {OPENAI_PATH: "openai", ANTHROPIC_PATH: "anthropic"}.get(path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if protocol is None:
            self._not_found()
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as e:
            self.send_json(400, wire.error_body(protocol, 400, f"invalid JSON body: {e}"))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        rec = self._rec = fake._record(protocol, path, headers, body)
        try:
            fake._serve(self, rec)
        except _Cut:
            self._drop()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (e.g. Ctrl-C); nothing to do
        finally:
            self._mark_answered()
            self._rec = None

    def _mark_answered(self) -> None:
        # Stamped before the last bytes go out: once the client has its answer, a test that
        # reads `t_answered` must already see it.
        rec = self._rec
        if rec is not None and rec.t_answered is None:
            rec.t_answered = time.monotonic()

    def _not_found(self) -> None:
        path = urlsplit(self.path).path
        protocol = "anthropic" if path.startswith(ANTHROPIC_PATH) else "openai"
        self.send_json(404, wire.error_body(protocol, 404, f"fake LLM has no route {path}"))

    # ---------------------------------------------------------- writing

    def send_json(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = wire.encode_body(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self._mark_answered()
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        # Chunked framing lets the client tell a finished stream from a dropped one.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_sse(self, event: str | None, data: dict) -> None:
        self.send_sse_raw(_sse_event(event, data))

    def send_sse_raw(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_sse(self) -> None:
        self._mark_answered()
        self.wfile.write(b"0\r\n\r\n")

    def _drop(self) -> None:
        """Close the socket mid-response, without finishing the chunked body."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
