"""What exec's per-domain egress costs per command: the loopback proxy started and stopped around
each command allowed the network, plus the sandbox's network rule (Landlock, and under bwrap a
preexec hook, i.e. a fork of nanobot instead of vfork).

Printed per mechanism, wall and CPU milliseconds per `exec` call of `true` (nothing connects):
- no network (the sandbox's own network namespace where it has one),
- network, held to the proxy in a network namespace of its own (root, or user namespaces),
- network, held to the proxy by Landlock's port rule and seccomp (where there is no namespace),
- network, not held (as before, and as where neither works),
and the proxy's own start + close on the event loop, and one HTTP request through it to a loopback
site (curl, via the proxy) against the same request with no proxy on the path (curl, unconfined).

    python scripts/bench_egress_proxy.py [--calls 50]

Runs in a throwaway workspace, touches nothing in ~/.nanobot, reaches no network beyond loopback.
CPU counts nanobot and the children it reaped. On a loaded machine wall time is mostly waiting for
a core: the load average is printed; read CPU beside wall.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_ByPort: Any = None
_Unheld: Any = None
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _per_call(make: Callable[[], Awaitable[Any]], calls: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per call, after one warm-up call; the launcher is stopped and reaped inside."""
    from nanobot.sandbox import launcher

    async def loop() -> None:
        await make()
        w0, c0 = time.perf_counter(), _cpu()
        for _ in range(calls):
            await make()
        launcher.close()
        out.extend([(time.perf_counter() - w0) / calls * 1000, (_cpu() - c0) / calls * 1000])

    out: list[float] = []
    asyncio.run(loop())
    return out[0], out[1]


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _variants() -> tuple[type, type]:
    from nanobot.sandbox import Confinement

    class ByPort(
        Confinement
    ):  # as where no network namespace can be made: Landlock's port rule + seccomp
        egress_namespace = property(lambda self: False)  # type: ignore[assignment]

    class Unheld(ByPort):  # as on a kernel with Landlock ABI < 4 (and no namespaces): no proxy
        filters_egress = property(lambda self: False)  # type: ignore[assignment]

    return ByPort, Unheld


def main() -> None:
    global _ByPort, _Unheld
    _ByPort, _Unheld = _variants()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()

    from nanobot.approvals import SessionApprover
    from nanobot.policy.egress import EgressPolicy
    from nanobot.sandbox import choose
    from nanobot.tools.base import ToolContext
    from nanobot.tools.egress_proxy import EgressProxy
    from nanobot.tools.exec_rules import ExecRules
    from nanobot.tools.safe_http import AddressPolicy, SafeFetcher
    from nanobot.tools.shell import ExecTool

    print(
        f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, "
        f"{os.cpu_count()} cores, {args.calls} calls each (ms per call: wall / CPU)"
    )
    site = ThreadingHTTPServer(("127.0.0.2", 0), _Site)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    url = f"http://127.0.0.2:{site.server_address[1]}/"
    approver = SessionApprover()  # one-shot: nobody asked; every domain is allowed below
    egress = EgressPolicy(("*",))
    checker = SafeFetcher(AddressPolicy.allowing("127.0.0.2/32"))

    async def proxy_cycle() -> None:
        proxy = EgressProxy(approver, egress)
        await proxy.start()
        proxy.close()

    wall, cpu = _per_call(proxy_cycle, args.calls * 10)
    print(f"proxy start + close alone          {wall:7.2f} / {cpu:6.2f}")

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "workspace"
        ws.mkdir()
        for mechanism in ("bwrap", "landlock"):
            conf = choose(mechanism)
            if conf.mechanism != mechanism:
                print(f"{mechanism}: not available ({conf.detail})")
                continue
            if not conf.filters_egress:
                print(
                    f"{mechanism}: {conf.detail} cannot hold commands to the proxy (Landlock ABI < 4)"
                )
                continue
            by_port = _ByPort(**{f.name: getattr(conf, f.name) for f in dataclasses.fields(conf)})
            rows = [
                ("no network", conf, False),
                ("network, own namespace + proxy", conf, True),
                ("network, by port + proxy", by_port, True),
                (
                    "network, not held (as before)",
                    _Unheld(**{f.name: getattr(conf, f.name) for f in dataclasses.fields(conf)}),
                    True,
                ),
            ]
            for label, c, network in rows:
                ctx = ToolContext(
                    workspace=ws,
                    confinement=c,
                    approver=approver,
                    egress=egress,
                    exec_rules=ExecRules(network=network),
                )
                tool = ExecTool(ctx, checker=checker)
                wall, cpu = _per_call(lambda tool=tool: tool.run(command="true"), args.calls)
                print(f"{mechanism:8} {label:30} {wall:7.2f} / {cpu:6.2f}")
            if shutil.which("curl"):
                ctx = ToolContext(
                    workspace=ws,
                    confinement=conf,
                    approver=approver,
                    egress=egress,
                    exec_rules=ExecRules(network=True),
                )
                tool = ExecTool(ctx, checker=checker)
                loop = f"for i in $(seq 20); do curl -s -o /dev/null {url}; done"
                wall, cpu = _per_call(
                    lambda tool=tool: tool.run(command=loop), max(1, args.calls // 10)
                )
                print(
                    f"{mechanism:8} {'20 curl requests via the proxy':30} {wall:7.2f} / {cpu:6.2f}"
                )
        if shutil.which("curl"):
            unconfined = ExecTool(
                ToolContext(
                    workspace=ws,
                    confinement=choose("none"),
                    approver=approver,
                    exec_rules=ExecRules(network=True, unconfined_ok=True),
                )
            )
            loop = f"for i in $(seq 20); do curl -s --noproxy '*' -o /dev/null {url}; done"
            wall, cpu = _per_call(lambda: unconfined.run(command=loop), max(1, args.calls // 10))
            print(f"{'none':8} {'20 curl requests, no proxy':30} {wall:7.2f} / {cpu:6.2f}")
    site.shutdown()


if __name__ == "__main__":
    main()
