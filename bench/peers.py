"""The peer brokers of the STOMP race: install, configure, start and stop them (as root).

RabbitMQ 3.10 (with its STOMP plugin) and ActiveMQ Classic 5.17 come from
Debian's packages, set up as ``../shared/notes/baselines.md`` describes: both
on loopback only, default settings otherwise, boot start off. Ports differ
from the notes' where chute now owns the default (61613 is chute's STOMP
port): RabbitMQ STOMP on 61643; ActiveMQ STOMP on 61623 (default connector)
and 61624 (``transport.tcpNoDelay=true``).

Run ``python -m bench.peers install`` once (the race does it with
``--peers``); ``start``/``stop`` NAME are there for trying a peer by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

RABBIT_STOMP_PORT = 61643
AMQ_STOMP_PORT = 61623
AMQ_NODELAY_PORT = 61624
PACKAGES = ("rabbitmq-server", "activemq")

_RABBIT_CONF = f"""\
listeners.tcp.default = 127.0.0.1:5672
stomp.listeners.tcp.1 = 127.0.0.1:{RABBIT_STOMP_PORT}
"""
_RABBIT_ENV = """\
NODENAME=rabbit@localhost
NODE_IP_ADDRESS=127.0.0.1
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
"""
_AMQ_CONNECTORS = (
    f'<transportConnector name="stomp" uri="stomp://127.0.0.1:{AMQ_STOMP_PORT}"/>\n'
    f'            <transportConnector name="stomp-nodelay" '
    f'uri="stomp://127.0.0.1:{AMQ_NODELAY_PORT}?transport.tcpNoDelay=true"/>\n'
)
_AMQ_AVAILABLE = Path("/etc/activemq/instances-available/main")
_AMQ_ENABLED = Path("/etc/activemq/instances-enabled/main")


def _run(*cmd: str, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def installed() -> bool:
    return all(shutil.which(tool) for tool in ("rabbitmq-server", "activemq"))


def install() -> None:
    """apt-get the peers (without starting them) and configure them for loopback."""
    if os.geteuid() != 0:
        raise RuntimeError("installing the peers needs root (apt-get, /etc)")
    if not installed():
        env = {"DEBIAN_FRONTEND": "noninteractive", "RUNLEVEL": "1"}  # no start on install
        _run("apt-get", "install", "-y", "--no-install-recommends", *PACKAGES, env=env)
    configure()


def configure() -> None:
    conf = Path("/etc/rabbitmq/rabbitmq.conf")
    conf.write_text(_RABBIT_CONF)
    env_file = Path("/etc/rabbitmq/rabbitmq-env.conf")
    text = env_file.read_text() if env_file.exists() else ""
    if "NODENAME=rabbit@localhost" not in text:
        env_file.write_text(text.rstrip("\n") + "\n" + _RABBIT_ENV)
    _run("rabbitmq-plugins", "enable", "--offline", "rabbitmq_stomp")
    for tool in ("rabbitmq-server", "activemq"):  # no start at boot
        with contextlib.suppress(RuntimeError, FileNotFoundError):
            _run("update-rc.d", tool, "disable")
    xml = _AMQ_AVAILABLE / "activemq.xml"
    text = xml.read_text()
    if 'name="stomp"' not in text:
        closing = "        </transportConnectors>"
        if closing not in text:
            raise RuntimeError(f"{xml}: no </transportConnectors> to add the STOMP ones before")
        xml.write_text(text.replace(closing, "            " + _AMQ_CONNECTORS + closing, 1))


def wait_for_stomp(port: int, timeout: float, *, login: str | None = None) -> None:
    """Until a STOMP CONNECT on ``port`` gets CONNECTED (or raise TimeoutError)."""
    deadline = time.monotonic() + timeout
    auth = f"login:{login}\npasscode:{login}\n" if login else ""
    frame = f"CONNECT\naccept-version:1.2\nhost:/\n{auth}\n\x00".encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(frame)
                if sock.recv(4096).startswith(b"CONNECTED"):
                    sock.sendall(b"DISCONNECT\n\n\x00")
                    return
        except OSError:
            pass
        time.sleep(0.5)  # polling a process that is still starting up
    raise TimeoutError(f"no STOMP broker answered on 127.0.0.1:{port} within {timeout:.0f} s")


class Peer:
    """One started peer broker; ``stop()`` ends exactly the processes it started."""

    name = "peer"
    stomp_args: tuple[str, ...] = ()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def pid(self) -> int | None:
        """The broker's own process (for CPU figures), if known."""
        return None


def _listener_pid(port: int) -> int | None:
    out = subprocess.run(
        ["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"pid=(\d+)", out)
    return int(match.group(1)) if match else None


class RabbitMQ(Peer):
    name = "rabbitmq"
    stomp_args = ("--port", str(RABBIT_STOMP_PORT), "--login", "guest", "--passcode", "guest")

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "ERL_EPMD_ADDRESS": "127.0.0.1"}
        self._proc = subprocess.Popen(
            ["rabbitmq-server"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_stomp(RABBIT_STOMP_PORT, 120, login="guest")  # its STOMP plugin is up last

    def pid(self) -> int | None:
        return _listener_pid(RABBIT_STOMP_PORT)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            _run("rabbitmqctl", "stop", timeout=60)
        if self._proc is not None:
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)
        epmd = _listener_pid(4369)  # the epmd daemon rabbitmq-server started
        if epmd is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(epmd, signal.SIGTERM)


class ActiveMQ(Peer):
    name = "activemq"
    stomp_args = ("--port", str(AMQ_STOMP_PORT))

    def __init__(self, *, nodelay: bool = False) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._java: int | None = None
        if nodelay:
            self.name = "activemq-nodelay"
            self.stomp_args = ("--port", str(AMQ_NODELAY_PORT))

    def start(self) -> None:
        if not _AMQ_ENABLED.exists():
            _AMQ_ENABLED.symlink_to(_AMQ_AVAILABLE)
        data = Path("/var/lib/activemq/main/data")
        data.mkdir(parents=True, exist_ok=True)
        shutil.chown(data, "activemq", "activemq")
        Path("/var/run/activemq").mkdir(exist_ok=True)
        shutil.chown("/var/run/activemq", "activemq", "activemq")
        self._proc = subprocess.Popen(
            ["service", "activemq", "console", "main"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_stomp(AMQ_STOMP_PORT, 120)
        self._java = _listener_pid(AMQ_STOMP_PORT)  # start-stop-daemon leaves our session

    def pid(self) -> int | None:
        return _listener_pid(AMQ_STOMP_PORT)

    def stop(self) -> None:
        if self._java is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._java, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while Path(f"/proc/{self._java}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)  # a JVM shutting down: poll its /proc entry
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)
        if _AMQ_ENABLED.is_symlink():
            _AMQ_ENABLED.unlink()  # no start at boot


PEERS = {"rabbitmq": RabbitMQ, "activemq": ActiveMQ}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["install", "start"])
    parser.add_argument("name", nargs="?", choices=sorted(PEERS))
    args = parser.parse_args(argv)
    if args.action == "install":
        install()
        print("installed and configured:", ", ".join(PACKAGES))
    elif args.action == "start":
        peer = PEERS[args.name or "rabbitmq"]()
        peer.start()
        print(f"{peer.name} up (pid {peer.pid()}); stop it with Ctrl-C")
        try:
            signal.pause()
        finally:
            peer.stop()


if __name__ == "__main__":
    main()
