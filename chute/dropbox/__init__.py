"""DropboxMQ interop: the filesystem protocol of DropboxMQ 1.2.

- :mod:`~chute.dropbox.transcoder`: message filenames both ways (pure), over
  :mod:`~chute.dropbox.escape`, the escaping of text in every name;
- :mod:`~chute.dropbox.names`: what a destination's directory, a subscription's
  directory and a claimed file may be called (pure);
- :mod:`~chute.dropbox.layout`: where queue and topic dropboxes live under a root;
- :mod:`~chute.dropbox.queue`, :mod:`~chute.dropbox.topic`: serverless produce,
  claim, ack, recover, publish and fan-out with real files;
- :mod:`~chute.dropbox.maintenance`: a dead consumer's claims brought back, a
  queue dropbox purged or deleted;
- :mod:`~chute.dropbox.watch`: inotify with polling as the fallback;
- :mod:`~chute.dropbox.client`: ``chute.connect("dropbox:///path")``, with its URL
  (:mod:`~chute.dropbox.options`) and its consumer (:mod:`~chute.dropbox.consumer`);
- :mod:`~chute.dropbox.mount`, :mod:`~chute.dropbox.bridge`: the broker's
  ``[[dropbox]]`` mounts (import and export);
- ``chute dropbox ...`` is :mod:`chute.cli.dropbox`'s.

See docs/dropbox.md.
"""

from chute.dropbox.layout import (
    QueueLayout,
    TopicLayout,
    init_queue,
    init_subscription,
    init_topic,
    queue_layout,
    topic_layout,
)
from chute.dropbox.maintenance import recover_client, recover_layout
from chute.dropbox.names import (
    check_destination_name,
    claim_name,
    destination_parts,
    split_claim_name,
    subscription_dir_name,
)
from chute.dropbox.queue import ConsumerOptions, Delivery, QueueConsumer, QueueProducer
from chute.dropbox.topic import TopicPublisher, distribute, subscribe
from chute.dropbox.transcoder import DecodedName, decode_filename, dropbox_id, encode_filename
from chute.dropbox.watch import Watcher

__all__ = [
    "ConsumerOptions",
    "DecodedName",
    "Delivery",
    "QueueConsumer",
    "QueueLayout",
    "QueueProducer",
    "TopicLayout",
    "TopicPublisher",
    "Watcher",
    "check_destination_name",
    "claim_name",
    "decode_filename",
    "destination_parts",
    "distribute",
    "dropbox_id",
    "encode_filename",
    "init_queue",
    "init_subscription",
    "init_topic",
    "queue_layout",
    "recover_client",
    "recover_layout",
    "split_claim_name",
    "subscribe",
    "subscription_dir_name",
    "topic_layout",
]
