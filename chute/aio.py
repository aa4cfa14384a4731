"""chute's asyncio client: the same API as :mod:`chute`, with ``await``.

async with chute.aio.connect("chute://127.0.0.1:5445") as conn:
    async with conn.session(ack="client") as s:
        await s.send("queue:orders", b"...")
        c = await s.consumer("queue:orders")
        m = await c.receive(timeout=1.0)
        m.ack()

``Connection``, ``Session`` and ``Consumer`` here are the asyncio client's
classes; the API they implement is :class:`chute.client.api.AsyncConnection`
and its siblings.
"""

from chute.client.aio import Connection, Consumer, Session, connect
from chute.client.received import Received

__all__ = ["Connection", "Consumer", "Received", "Session", "connect"]
