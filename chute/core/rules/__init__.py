"""The core's rules: what the broker decides over its model (the broker, routing,
admission, destinations made by use, subscriptions, transactions local and two-phase,
dead letters, recovery, cursors and batches, who may do what).

The middle floor of the core: it imports the model, never the operations.
"""
