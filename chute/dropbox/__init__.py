"""DropboxMQ interop: the filesystem protocol of DropboxMQ 1.2 (seed 000)."""

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
    "DecodedName",
    "check_destination_name",
    "claim_name",
    "decode_filename",
    "destination_parts",
    "dropbox_id",
    "encode_filename",
    "split_claim_name",
    "subscription_dir_name",
]
