"""The core's model: what the broker holds (addresses, settings, queues and their lanes,
consumers, topics, streams and their readers, paging, selectors, the Store interface).

The bottom floor of the core: it imports neither the rules nor the operations.
"""
