"""AMQP 0-9-1 over chute's core: a sans-IO driver package, like :mod:`chute.stomp`.

- :mod:`chute.amqp.codes`: AMQP's reply codes and :class:`~chute.amqp.codes.AmqpError`.
- :mod:`chute.amqp.codec`: frames in and out, over ``pamqp``'s marshalling, with chute
  owning the buffering and the assembly of content (method, header, body frames).
- :mod:`chute.amqp.names`: AMQP's names (any UTF-8 up to 255 bytes) ↔ chute's.
- :mod:`chute.amqp.properties`: AMQP message properties ↔ chute's message.
- :mod:`chute.amqp.channel` and :mod:`chute.amqp.session`: the connection and channel
  state machines over a core connection.

The asyncio transport is :mod:`chute.server.amqp`; the exchanges' routing rules live in
:mod:`chute.core.rules.exchanges`, so they are the broker's, not this driver's.
"""
