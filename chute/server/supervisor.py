"""``chute serve --nodes N``: N nodes on one machine, started and kept running by one parent.

**The parent** (:func:`run_nodes`) plans the nodes (:func:`plan_nodes`): names
``node-0`` … ``node-<N-1>``, each with its own native port (``node_port + i``) and
its journal under ``DATA/nodes/<name>``. It checks that every port is free, then
starts each node as a ``chute serve`` process of its own, with the parent's own
arguments and one more: the read end of a pipe (``--node-of FD``) over which it
sends the node its :class:`~chute.cluster.fixed.FixedNodes`, as one JSON line. It
keeps the pipe's write end open while the node runs, as a lifeline: when the parent
dies, the node reads the end of the pipe and stops. The nodes run in a process
group of their own, so a terminal's Ctrl-C reaches the parent only, which passes
SIGINT and SIGTERM on to every node and exits once they all stopped.

A node says it is ready by printing one line, :data:`READY` and its listeners as
JSON, on its standard output (a pipe to the parent); its log goes to the parent's
standard error. Once every node is ready the parent prints the one ``chute
listening`` line a single broker prints. A node that stops when it was not asked
to (killed, crashed, or stopped by someone else) is logged once, with its exit
status or signal, and started again after a backoff (:data:`BACKOFF_MIN` doubling
up to :data:`BACKOFF_MAX`; back to the minimum once a node ran
:data:`BACKOFF_RESET_S`); a node that fails before it was ever ready (a port in
use, a journal locked) stops them all: the parent exits with status 1.

**Credentials.** With ``[users]`` configured the links log in: as ``[cluster]
user`` when it is set, else as a user made for this run only, with a random
password the parent makes, hashes, and sends the nodes over the pipe: it is never
written to a file, a command line, the environment or a log.

**A node** (:func:`read_node`, :func:`as_node`) reads its description from the
pipe, and becomes a member of the fixed cluster: its data directory, its own port,
its links' credentials, the ``SO_REUSEPORT`` client listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from chute import passwords
from chute.cluster.fixed import FixedNodes
from chute.config import ServerConfig
from chute.core.rules.access import Action, Role, User
from chute.errors import ConfigError
from chute.server.listener import bind

log = logging.getLogger("chute.nodes")

READY: Final = "chute node ready "
"""How a node's line on its standard output begins once it listens."""
BACKOFF_MIN: Final = 0.1
BACKOFF_MAX: Final = 10.0
BACKOFF_RESET_S: Final = 10.0
"""A node that ran this long before it stopped is restarted after the shortest pause."""
LINK_USER: Final = "chute-nodes"
"""The user the links of one run log in as, when users exist and [cluster] user does not."""
_WILDCARDS: Final = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


def core_count() -> int:
    """The cores this process may run on (``--nodes 0`` starts one node per core)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def node_directory(data_dir: Path, node: str) -> Path:
    """Where a node of ``--nodes`` keeps its data (its journal in ``journal/`` there)."""
    return data_dir / "nodes" / node


def _shared_ports(config: ServerConfig) -> list[tuple[str, int]]:
    listen = config.listen
    ports = [
        ("port", listen.port),
        ("tls_port", listen.tls_port),
        ("stomp_port", listen.stomp_port),
        ("stomp_tls_port", listen.stomp_tls_port),
        ("amqp_port", listen.amqp_port),
        ("amqp_tls_port", listen.amqp_tls_port),
        ("http_port", listen.http_port),
    ]
    if config.smq is not None:
        ports += [("smq source port", config.smq.source_port)]
        ports += [("smq sink port", config.smq.sink_port)]
    return [(name, port) for name, port in ports if port]


def plan_nodes(config: ServerConfig, count: int, node_port: int) -> list[FixedNodes]:
    """Every node's description: names, own ports (``node_port`` + i; 0: the native
    port + 1 + i), the links' credentials.

    Raises:
        ConfigError: a setting that --nodes cannot run with.
    """
    cluster = config.cluster
    if cluster.coordinator:
        raise ConfigError(
            "--nodes runs a cluster of its own on this machine, with no etcd: leave out "
            "--cluster ([cluster] coordinator), or run each node with --cluster and --node"
        )
    if cluster.node or cluster.advertise:
        raise ConfigError(
            "--nodes names its nodes node-0, node-1, ...: leave out --node and --advertise"
        )
    if cluster.tls:
        raise ConfigError(
            "--nodes links its nodes on this machine, without TLS: leave out [cluster] tls"
        )
    if not node_port:
        if not config.listen.port:
            raise ConfigError("--nodes with the native port off (--port 0) needs --node-port")
        node_port = config.listen.port + 1
    if node_port + count - 1 > 65535:
        raise ConfigError(f"--node-port {node_port} leaves no room for {count} nodes below 65536")
    shared = dict((port, name) for name, port in _shared_ports(config))
    for port in range(node_port, node_port + count):
        if port in shared:
            raise ConfigError(
                f"the nodes' own ports ({node_port}-{node_port + count - 1}) take "
                f"{port}, the {shared[port]}: give --node-port another first port"
            )
    host = _WILDCARDS.get(config.listen.host, config.listen.host)
    host = f"[{host}]" if ":" in host else host
    names = [f"node-{i}" for i in range(count)]
    members = {name: f"{host}:{node_port + i}" for i, name in enumerate(names)}
    user, password, hashed = cluster.user, cluster.password, ""
    if config.users and not user:
        user = next(
            name
            for name in (LINK_USER, *(f"{LINK_USER}-{i}" for i in range(2, 100)))
            if name not in config.users
        )
        password = secrets.token_urlsafe(32)
        hashed = passwords.hash_password(password)
    return [
        FixedNodes(name, members, user=user, password=password, password_hash=hashed)
        for name in names
    ]


def check_ports_free(config: ServerConfig, nodes: Sequence[FixedNodes]) -> None:
    """Raises OSError naming a port something listens on already (another broker, or
    another --nodes run, which SO_REUSEPORT would otherwise let share it)."""
    wanted = [*_shared_ports(config), *((n.node, n.port) for n in nodes)]
    for name, port in wanted:
        try:
            sockets = bind(config.listen.host, port)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot listen on {config.listen.host}:{port} ({name}): {exc.strerror} "
                "(is another broker running?)",
            ) from None
        for sock in sockets:
            sock.close()


# -- a node ---------------------------------------------------------------------------


def read_node(fd: int) -> FixedNodes:
    """This node's description, read from the pipe its parent gave it (the pipe stays
    open: its end says that the parent is gone).

    Raises:
        ConfigError: nothing, or not a description, arrived.
    """
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:
            raise ConfigError(f"--node-of {fd}: cannot read it: {exc.strerror}") from None
        if not chunk:
            raise ConfigError(f"--node-of {fd}: its parent said nothing (it is for --nodes)")
        data += chunk
    return FixedNodes.from_json(data.decode("utf-8", "replace"))


def as_node(config: ServerConfig, nodes: FixedNodes) -> None:
    """Make ``config`` (the parent's) the configuration of the node ``nodes`` describes."""
    config.nodes = nodes
    config.cluster.node = nodes.node
    config.cluster.user, config.cluster.password = nodes.user, nodes.password
    if nodes.password_hash:  # the run's own link user, granted linking only
        role = Role(nodes.user, {Action.CLUSTER: ("*",)})
        config.roles[role.name] = role
        config.users[nodes.user] = User(nodes.user, nodes.password_hash, (role.name,))
    config.storage.data_dir = node_directory(config.storage.data_dir, nodes.node)
    if nodes.node != min(nodes.members):
        config.dropbox = []  # a dropbox mount is served by the first node only


def ready_line(bound: list[tuple[str, str, int]]) -> str:
    """What a node prints once it listens."""
    return READY + json.dumps(bound)


# -- the parent -----------------------------------------------------------------------


@dataclasses.dataclass
class _Child:
    """One node as the parent runs it."""

    nodes: FixedNodes
    process: asyncio.subprocess.Process | None = None
    bound: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)
    ever_ready: bool = False
    status: int = 0

    @property
    def name(self) -> str:
        return self.nodes.node


def describe_exit(status: int) -> str:
    """A process's exit as the parent logs it: a status, or the signal that killed it."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    return f"exited with status {status}"


class Supervisor:
    """The parent of ``--nodes``: starts, restarts and stops the nodes (module docstring).
    Runs on one event loop."""

    def __init__(
        self, config: ServerConfig, nodes: Sequence[FixedNodes], command: Sequence[str]
    ) -> None:
        self.config = config
        self.children = [_Child(n) for n in nodes]
        self.command = list(command)  # what starts a node, but for the pipe's number
        self.stopping = False
        self.failed = False
        self._stop = asyncio.Event()
        self._settled = asyncio.Event()  # every node ready once, or the start failed

    async def run(self) -> int:
        """Run the nodes until a signal stops them; the exit status (0: all stopped cleanly)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig)
        data = self.config.storage.data_dir
        log.info(
            "starting %d nodes (%s), journals under %s",
            len(self.children),
            ", ".join(f"{c.name} at {c.nodes.members[c.name]}" for c in self.children),
            node_directory(data, "NODE"),
        )
        tasks = [asyncio.create_task(self._keep(c), name=f"node-{c.name}") for c in self.children]
        await self._settled.wait()
        if not self.failed and not self.stopping:
            print(self._listening(), flush=True)
        await asyncio.gather(*tasks)
        log.info("every node stopped")
        if self.failed:
            return 1
        # a node signalled before it had set up its handlers ends by the signal itself
        clean = (0, -signal.SIGTERM, -signal.SIGINT)
        return 0 if all(c.status in clean for c in self.children) else 1

    def _listening(self) -> str:
        first = self.children[0].bound
        shared = [f"{n} {h}:{p}" for n, h, p in first if n != "native-node"]
        own = [
            f"{c.name} {h}:{p}" for c in self.children for n, h, p in c.bound if n == "native-node"
        ]
        store = (
            "in memory"
            if self.config.storage.store == "memory"
            else f"in the journals in {node_directory(self.config.storage.data_dir, 'NODE')}"
        )
        return (
            f"chute listening: {', '.join(shared) or 'nothing'} on {len(self.children)} nodes "
            f"({', '.join(own)}; messages {store})"
        )

    def request_stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop every node (passing ``sig`` on) and start none again."""
        if not self.stopping:
            log.info("stopping %d nodes", len(self.children))
        self.stopping = True
        self._stop.set()
        self._settled.set()
        for child in self.children:
            process = child.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    async def _keep(self, child: _Child) -> None:
        """Run ``child``, and again whenever it stops unasked, until the nodes stop."""
        delay = BACKOFF_MIN
        while not self.stopping:
            started = time.monotonic()
            try:
                status = child.status = await self._run_once(child)
            except OSError as exc:  # no process at all (out of descriptors or processes)
                log.error("node %s could not be started: %s", child.name, exc)
                status = child.status = 1
            if self.stopping:
                return
            pid = child.process.pid if child.process is not None else 0
            if not child.ever_ready:
                log.error(
                    "node %s (pid %d) %s before it was ready: stopping the others",
                    child.name,
                    pid,
                    describe_exit(status),
                )
                self.failed = True
                self.request_stop()
                return
            if time.monotonic() - started >= BACKOFF_RESET_S:
                delay = BACKOFF_MIN
            log.warning(
                "node %s (pid %d) %s; starting it again in %.1f s",
                child.name,
                pid,
                describe_exit(status),
                delay,
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
            delay = min(delay * 2, BACKOFF_MAX)

    async def _run_once(self, child: _Child) -> int:
        """Start ``child``, follow it until it exits; its exit status (-N: signal N)."""
        read, lifeline = os.pipe()
        try:
            os.write(lifeline, (child.nodes.to_json() + "\n").encode())
            process = child.process = await asyncio.create_subprocess_exec(
                *self.command,
                str(read),
                pass_fds=(read,),
                stdout=asyncio.subprocess.PIPE,
                process_group=0,  # a terminal's Ctrl-C reaches the parent only
            )
        except BaseException:
            os.close(lifeline)
            raise
        finally:
            os.close(read)
        try:
            again = child.ever_ready
            log.info("node %s started (pid %d)", child.name, process.pid)
            if self.stopping:
                process.send_signal(signal.SIGTERM)
            stdout = process.stdout
            if stdout is not None:
                async for raw in stdout:
                    self._said(child, raw.decode("utf-8", "replace").rstrip("\n"), again)
            return await process.wait()
        finally:
            os.close(lifeline)  # after its exit: the node reads its end only if we die

    def _said(self, child: _Child, line: str, again: bool) -> None:
        if not line.startswith(READY):
            print(line, flush=True)  # not ours to hide
            return
        child.bound = [(str(n), str(h), int(p)) for n, h, p in json.loads(line[len(READY) :])]
        child.ever_ready = True
        if again:
            log.info("node %s is back", child.name)
        if all(c.ever_ready for c in self.children):
            self._settled.set()


def run_nodes(config: ServerConfig, count: int, node_port: int, command: Sequence[str]) -> int:
    """``chute serve --nodes``: plan, check the ports, supervise. The exit status.
    ``command`` starts a node once the number of its pipe is added.

    Raises:
        ConfigError: settings --nodes cannot run with; OSError: a port is in use.
    """
    nodes = plan_nodes(config, count or core_count(), node_port)
    check_ports_free(config, nodes)
    return asyncio.run(Supervisor(config, nodes, command).run())


def watch_lifeline(loop: asyncio.AbstractEventLoop, fd: int, stop: Callable[[], None]) -> None:
    """Call ``stop()`` once the parent is gone (its end of the pipe ``fd`` closed)."""

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            log.warning("the parent process is gone: stopping")
            stop()

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
