"""PyTorch `torch.save` files, read without importing torch (docs/formats.md sections 2 and 3).

The object pickle is walked by `SafeUnpickler`, which mirrors torch's `weights_only=True` allowlist
(torch/_weights_only_unpickler.py `_get_allowed_globals`) with stubs that only record storage key,
dtype, offset, shape and stride, and builds the plain data training scripts save beside their tensors
(argparse.Namespace, numpy scalars, omegaconf configs: data_classes.py) as values. A pickle that calls or builds
any other global is refused by name (with --pickled-objects, an object built without arguments is kept as an inert
record: pickled_objects.py); nothing from the pickle is imported or called.
`ckptstat scan` (analysis/scan/torch_load.py) follows torch.load's paths through a file and walks each
pickle's opcodes on pickle_machine.py, without unpickling.

- allowlist.py   torch's allowed globals as names, and the recording stubs they become
- unpickler.py   the bounded, restricted unpickler, and the walk over the object it builds
- data_classes.py  training scripts' plain data outside the allowlist, and the value each becomes
- pickled_objects.py  whole pickled objects (torch.save(model)), read as inert records with --pickled-objects
- values.py      non-tensor values as shown (`Checkpoint.objects`): a torch.save's data, DCP's and Megatron's items
- containers.py  the zip and legacy layouts: where the pickle and each storage's bytes are
- zipstream.py   values of storages in compressed zip records
- reader.py      storages and views -> TensorInfo; detection and registration
- pt2.py         torch.export archives (.pt2): their weights and tensor constants, what torch.export.load unpickles
- pickle_machine.py, pickle_walk.py  a model of the C unpickler that scan walks each pickle on
- streams.py     the byte sources those walks read (file windows, inflated zip members)
"""
from .allowlist import ALLOWED_GLOBALS, is_allowed
from .containers import LEGACY_MAGIC, LEGACY_PROTOCOL, CheckedZipFile
from .pt2 import open_pt2
from .reader import open_legacy, open_zip
from .unpickler import MAX_ITEMS, MAX_STACK, SafeUnpickler, unpickle, walk

__all__ = ["ALLOWED_GLOBALS", "LEGACY_MAGIC", "LEGACY_PROTOCOL", "MAX_ITEMS", "MAX_STACK", "CheckedZipFile", "SafeUnpickler",
           "is_allowed", "open_legacy", "open_pt2", "open_zip", "unpickle", "walk"]
