"""The pure core: destinations, routing, delivery, acks, transactions. No sockets, no files."""
