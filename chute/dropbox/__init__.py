"""DropboxMQ interop: the filesystem protocol of DropboxMQ 1.2 (seed 000)."""

from chute.dropbox.layout import QueueLayout, init_queue, queue_layout
from chute.dropbox.queue import (
    ConsumerOptions,
    Delivery,
    QueueConsumer,
    QueueProducer,
    recover_client,
)
from chute.dropbox.transcoder import (
    DecodedName,
    check_destination_name,
    claim_name,
    decode_filename,
    destination_parts,
    dropbox_id,
    encode_filename,
    split_claim_name,
    subscription_dir_name,
)

__all__ = [
    "ConsumerOptions",
    "DecodedName",
    "Delivery",
    "QueueConsumer",
    "QueueLayout",
    "QueueProducer",
    "check_destination_name",
    "claim_name",
    "decode_filename",
    "destination_parts",
    "dropbox_id",
    "encode_filename",
    "init_queue",
    "queue_layout",
    "recover_client",
    "split_claim_name",
    "subscription_dir_name",
]
