"""High availability: a node's live process and its backups (docs/ha.md).

The live ships its journal's bytes to each backup as they are written
(:mod:`chute.ha.live`); a backup keeps an identical journal (:mod:`chute.ha.backup`,
:mod:`chute.ha.files`) and answers with how far it has it on disk; a durable
operation is confirmed once enough of them do (:mod:`chute.ha.gate`). Who is live is
agreed in etcd, fenced by the election key's revision, the epoch
(:mod:`chute.ha.elector`). :mod:`chute.ha.role` runs a process through its roles.
"""
