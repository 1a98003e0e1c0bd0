"""TensorFlow tensor bundles (TF1 `model.ckpt-N` and TF2 object-based `ckpt-N`), read without TensorFlow
(docs/formats.md section 4). Protobuf is decoded by the small wire-format reader here; nothing else is
needed.

- wire.py        the protobuf wire format (varints, fields)
- table.py       the `.index` LevelDB-style table: footer, blocks, entries
- records.py     the table's values: BundleHeaderProto and BundleEntryProto
- partitions.py  partitioned variables: slice keys, and their values gathered back on demand
- graph.py       the TF2 object graph (model paths of variables Keras 3 keys under optimizer/)
- checksums.py   `--verify`: crc32c of index blocks and tensor bytes
- reader.py      the reader: shards, byte ranges, TensorInfo; registration
"""
from .partitions import read_partitioned, slice_key
from .reader import open_bundle
from .records import parse_entry
from .table import MAGIC_BYTES, block_entries, block_handle, read_table
from .wire import fields

__all__ = ["MAGIC_BYTES", "block_entries", "block_handle", "fields", "open_bundle", "parse_entry", "read_partitioned",
           "read_table", "slice_key"]
