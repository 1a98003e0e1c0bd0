"""Whole pickled objects (`torch.save(model)`: an ultralytics YOLO `.pt`, a tutorial's `torch.save(model, path)`), read
only when the user asks for it: `ckptstat --pickled-objects ...` (docs/torch.md, "Pickled models").

torch.save of an object pickles the object itself: each nn.Module is its class with no arguments (`copyreg.__newobj__`,
pickle's NEWOBJ) and a BUILD of its `__dict__`: `_parameters`, `_buffers`, `_non_persistent_buffers_set`, `_modules`,
its hooks and plain attributes. torch.load(weights_only=True) refuses the file (the classes are outside its
allowlist); torch.load(weights_only=False) imports each class and lets it run its `__setstate__`.

With the switch on, the reader builds each such object as an inert `Instance`, the class's name and the state BUILD
gave it, and names a module's tensors as `Module.state_dict` names them: its parameters, its persistent buffers, then
each child module's under the child's name (a submodule registered twice, and a parameter tied to another, under each
name, as state_dict). Nothing is imported or called. Only what a plain object's pickle holds is read this way: a class
built (NEWOBJ) or called (REDUCE) with no arguments, then given its state. A class whose own `__reduce__` passes
arguments (an enum value, a function of the user's) is still refused by name: that is a call, and the switch reads
objects, not calls. Two rebuilders real models pickle are read as the object they rebuild (REBUILDERS): transformers'
`kernels` layers pickle a function module as `_rebuild_kernel_func(module, name)`, and an activation module keeps
`functools.partial(gelu, approximate="tanh")`; neither holds tensors.

The switch (core/switches.py) is off by default, as torch's own default is weights_only: a file that builds classes
outside the allowlist is what `ckptstat scan` calls unsafe, and reading it is a choice the user makes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .allowlist import Named, Refused
from .data_classes import Attributes


class Instance(Attributes):
    """An object of a class outside torch's allowlist, built without arguments: its attributes (BUILD's state; a state
    that is not a dict, from a class's own __getstate__, kept under `__state__`)."""

    def build(self, state: Any) -> None:
        try:
            super().build(state)   # a __dict__, or (__dict__, slots)
        except Refused:            # a state of the class's own __getstate__
            self["__state__"] = state

    def is_module(self) -> bool:
        """Whether it holds what every nn.Module's __dict__ holds."""
        return all(isinstance(self.get(k), dict) for k in ("_parameters", "_buffers", "_modules"))

    def state_dict_items(self) -> Iterator[tuple[Any, Any, str | None]]:
        """(key, value, role) in Module.state_dict's order (torch/nn/modules/module.py `_save_to_state_dict`, then
        the children): parameters and persistent buffers that are not None (role "parameter", "buffer"), then each
        child module that is not None (role None)."""
        dropped = self.get("_non_persistent_buffers_set")
        dropped = dropped if isinstance(dropped, (set, frozenset)) else set()
        yield from ((k, v, "parameter") for k, v in self["_parameters"].items() if v is not None)
        yield from ((k, v, "buffer") for k, v in self["_buffers"].items() if v is not None and k not in dropped)
        yield from ((k, v, None) for k, v in self["_modules"].items() if v is not None)


def _kernel_function(module: Any, name: Any) -> str:
    if not (isinstance(module, str) and isinstance(name, str)):
        raise Refused("_rebuild_kernel_func called with something other than a module's and a function's names")
    return f"{module}.{name}"


def _partial(func: Any = None, *rest: Any) -> str:
    if rest or not isinstance(func, (Named, Instance)):
        raise Refused("functools.partial called with something other than one named function")
    return "functools.partial"


def _reconstructor(cls: Any = None, base: Any = None, state: Any = None) -> str:
    if not (isinstance(cls, Named) and getattr(base, "name", None) == "builtins.object" and state is None):
        raise Refused("copyreg._reconstructor called with something other than a class, object and None")
    return cls.name


# Globals that rebuild an object from plain arguments, and the class whose Instance each makes instead (only with the
# switch on): transformers' `kernels` function modules; functools.partial, pickled as `partial(func)` then BUILD with
# (func, args, keywords, __dict__) (transformers' GELUTanh keeps `partial(gelu, approximate="tanh")`); protocols 0 and 1
# build a plain object as `copyreg._reconstructor(cls, object, None)` (what protocol 2's NEWOBJ replaced).
REBUILDERS: dict[str, Callable[..., str]] = {"kernels._internals.layer.layer._rebuild_kernel_func": _kernel_function,
                                              "functools.partial": _partial, "copyreg._reconstructor": _reconstructor}


def objects_note(classes: frozenset[str]) -> str:
    """What the reader says of a pickle whose objects of `classes` it read as Instances."""
    return (f"--pickled-objects: {len(classes)} class(es) outside torch's weights_only allowlist read as inert records "
            f"(nothing imported or called): {', '.join(sorted(classes))}; each nn.Module's tensors named as its "
            "state_dict names them (parameters and persistent buffers; tensors kept as plain attributes are in no "
            "state_dict and not listed)")
