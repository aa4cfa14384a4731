"""The core's operations: what a client does through a driver (its connection and
sessions, managing, moving, browsing, statistics, the connect log).

The top floor of the core: it imports the rules and the model.
"""
