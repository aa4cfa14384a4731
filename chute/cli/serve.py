"""``chute serve``: run the broker, or (``--nodes N``) N nodes of it on this machine.

With ``--nodes`` this process is the nodes' parent (:mod:`chute.server.supervisor`):
it starts each node as ``chute serve`` again, with the same arguments and the
hidden ``--node-of FD`` (the pipe that tells the node who it is).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Final

from chute.cli.message import UsageError, whole

NODE_FLAG: Final = "--node-of"
"""What makes ``chute serve`` a node of ``--nodes``: the pipe its parent talks over."""


def add_serve_command(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--data-dir", type=Path, help="where the broker keeps its data")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="native protocol port (default 5445, 0 = off)")
    serve.add_argument("--stomp-port", type=int, help="STOMP port (default 61613, 0 = off)")
    serve.add_argument(
        "--http-port", type=int, help="HTTP port: STOMP over WebSocket (default 8445, 0 = off)"
    )
    serve.add_argument(
        "--store",
        choices=["journal", "memory"],
        help="journal (default: on disk in the data dir) or memory",
    )
    serve.add_argument(
        "--sync",
        choices=["always", "batch", "never"],
        help="when the journal fsyncs (default always)",
    )
    smq = serve.add_argument_group("Simple-message-queue (smq) listeners, docs/smq.md")
    smq.add_argument(
        "--smq-queue", metavar="NAME", help="serve smq's clients on this queue (default smq)"
    )
    smq.add_argument(
        "--smq-source-port", type=int, metavar="PORT", help="source port (default 6211, 0 = off)"
    )
    smq.add_argument(
        "--smq-sink-port", type=int, metavar="PORT", help="sink port (default 6212, 0 = off)"
    )
    serve.add_argument(
        "--tls-port", type=int, help="native protocol over TLS, chutes:// (default 0 = off)"
    )
    serve.add_argument(
        "--stomp-tls-port", type=int, help="STOMP over TLS, e.g. 61614 (default 0 = off)"
    )
    serve.add_argument("--amqp-port", type=int, help="AMQP 0-9-1, e.g. 5672 (default 0 = off)")
    serve.add_argument(
        "--amqp-tls-port", type=int, help="AMQP 0-9-1 over TLS, e.g. 5671 (default 0 = off)"
    )
    serve.add_argument(
        "--http-tls",
        action="store_const",
        const=True,
        help="serve HTTPS and WSS (wss://) on the HTTP port",
    )
    serve.add_argument("--tls-cert", help="PEM certificate chain of every TLS listener")
    serve.add_argument("--tls-key", help="PEM private key, if not in --tls-cert")
    serve.add_argument("--tls-ca", help="PEM CA file that signs client certificates")
    serve.add_argument(
        "--tls-client-certs",
        choices=["none", "optional", "required"],
        help="ask TLS clients for a certificate whose CN names their user (default none)",
    )
    serve.add_argument(
        "--flow-backlog",
        type=int,
        help="pause a queue's producers while its consumers lag this many messages "
        "(default 5000; 0 = never)",
    )
    serve.add_argument(
        "--max-memory",
        help="message data held in memory before durable queues page to disk "
        "(default 64MiB; 0 = never page)",
    )
    serve.add_argument(
        "--disk-free-limit",
        help="under this much free space on the journal's disk, producers wait while "
        "consumers ack (default 64MiB; 0 = off)",
    )
    cluster = serve.add_argument_group("a cluster of nodes, docs/cluster.md")
    cluster.add_argument(
        "--cluster",
        metavar="etcd://HOST:PORT[/NAME]",
        help="join the cluster agreed in this etcd (default: no cluster)",
    )
    cluster.add_argument("--node", help="this node's name in the cluster (unique in it)")
    cluster.add_argument(
        "--advertise",
        metavar="HOST:PORT",
        help="where the other nodes dial this one (default: the native listener's)",
    )
    cluster.add_argument(
        "--nodes",
        type=whole(),
        metavar="N",
        help="run N nodes on this machine (0 = one per core), sharing the client ports, "
        "each with its journal in DATA/nodes/node-I; no etcd (default: one broker)",
    )
    cluster.add_argument(
        "--node-port",
        type=whole(1, 65535),
        metavar="PORT",
        help="with --nodes: node I's own native port is PORT+I (default: the native port + 1)",
    )
    cluster.add_argument(NODE_FLAG, type=int, dest="node_of", help=argparse.SUPPRESS)
    serve.add_argument(
        "--log-level",
        default=os.environ.get("CHUTE_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
    )
    serve.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from chute import config as config_module  # noqa: PLC0415 - keeps client commands light
    from chute.admin.site import Site  # noqa: PLC0415
    from chute.server import supervisor  # noqa: PLC0415
    from chute.server.process import run  # noqa: PLC0415
    from chute.smq import settings as smq_settings  # noqa: PLC0415

    nodes = None
    if args.node_of is not None:
        nodes = supervisor.read_node(args.node_of)
    elif args.node_port is not None and args.nodes is None:
        raise UsageError("--node-port numbers the nodes of --nodes: give --nodes too")
    who = f" {nodes.node}" if nodes is not None else ""
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s{who} %(name)s: %(message)s",
    )
    overrides = {
        "host": args.host,
        "port": args.port,
        "stomp_port": args.stomp_port,
        "http_port": args.http_port,
        "data_dir": str(args.data_dir) if args.data_dir else None,
        "store": args.store,
        "sync": args.sync,
        "max_memory": args.max_memory,
        "disk_free_limit": args.disk_free_limit,
        "tls_port": args.tls_port,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "stomp_tls_port": args.stomp_tls_port,
        "amqp_port": args.amqp_port,
        "amqp_tls_port": args.amqp_tls_port,
        "http_tls": args.http_tls,
        "tls_ca": args.tls_ca,
        "tls_client_certs": args.tls_client_certs,
        "flow_backlog": args.flow_backlog,
        "cluster_coordinator": args.cluster,
        "cluster_node": args.node,
        "cluster_advertise": args.advertise,
    }
    config = config_module.load(args.config, overrides)
    config.smq = smq_settings.with_overrides(
        config.smq,
        queue=args.smq_queue,
        source_port=args.smq_source_port,
        sink_port=args.smq_sink_port,
    )

    if nodes is not None:
        supervisor.as_node(config, nodes)
    elif args.nodes is not None:
        command = [sys.executable, "-m", "chute.cli", *args.argv, NODE_FLAG]
        return supervisor.run_nodes(config, args.nodes, args.node_port or 0, command)

    def ready(bound: list[tuple[str, str, int]]) -> None:
        if nodes is not None:  # to the parent
            print(supervisor.ready_line(bound), flush=True)
            return
        where = ", ".join(f"{name} {host}:{port}" for name, host, port in bound) or "nothing"
        store = (
            "in memory"
            if config.storage.store == "memory"
            else f"journal in {config.storage.data_dir}"
        )
        print(f"chute listening: {where} (messages {store})", flush=True)

    run(config, ready=ready, site=Site, lifeline=args.node_of)
    return 0
