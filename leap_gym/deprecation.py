"""Old module paths that moved in the package restructuring keep importing, for one release, with a warning.

One mechanism for both packages: `install_moved_modules` puts a finder first on ``sys.meta_path`` that
answers an old dotted name (``leap_gym.parse``, ``leap_agents.rollout``, and what lies under an old
package path) with the module at its new path, the same object, after a `DeprecationWarning` that
names the new path. An old module whose contents were split answers with a view of its new modules.
The old names also stay reachable as attributes of the package (``leap_gym.parse``), with the warning.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import Any

def _outside_stacklevel() -> int:
    """The ``stacklevel`` of `warnings.warn`, called from this module's caller, that blames the importing code.

    `warnings` itself skips importlib's bootstrap frames; this skips the other import machinery (this
    module, ``importlib.import_module``) on top of them.
    """
    frame, level = sys._getframe(2), 2
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            frame = frame.f_back
            continue
        if name != __file__ and not name.endswith(("importlib/__init__.py", "importlib\\__init__.py")):
            break
        frame, level = frame.f_back, level + 1
    return level


class _SplitModule(types.ModuleType):
    """An old module whose contents now live in several modules: attributes come from the first that has them."""

    def __init__(self, name: str, targets: tuple[str, ...]):
        super().__init__(name, f"Deprecated: moved to {', '.join(targets)}.")
        self.__targets = [importlib.import_module(t) for t in targets]

    def __getattr__(self, name: str) -> Any:
        for module in self.__targets:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({n for m in self.__targets for n in dir(m)})


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, moved: dict[str, str | tuple[str, ...]]):
        self.moved = {old: (new,) if isinstance(new, str) else tuple(new) for old, new in moved.items()}

    def targets(self, fullname: str) -> tuple[str, ...] | None:
        if fullname in self.moved:
            return self.moved[fullname]
        for old, new in self.moved.items():  # a module under a moved package
            if len(new) == 1 and fullname.startswith(old + "."):
                return (new[0] + fullname[len(old):],)
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        new = self.targets(fullname)
        if new is None:
            return None
        real = importlib.util.find_spec(new[0]) if len(new) == 1 else None
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=bool(real and real.submodule_search_locations))
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = self.targets(spec.name)
        assert new is not None
        warnings.warn(f"`{spec.name}` moved to `{' / '.join(new)}`; import it from there (the old path goes in the next "
                      "release)", DeprecationWarning, stacklevel=_outside_stacklevel())
        return importlib.import_module(new[0]) if len(new) == 1 else _SplitModule(spec.name, new)

    def exec_module(self, module: types.ModuleType) -> None:
        """The module returned by `create_module` is already loaded."""

    def get_code(self, fullname: str) -> Any:
        """For ``python -m <old path>``: the code of the module at the new path."""
        new = self.targets(fullname)
        spec = importlib.util.find_spec(new[0]) if new and len(new) == 1 else None
        return spec.loader.get_code(spec.name) if spec and hasattr(spec.loader, "get_code") else None


class _PackageWithMovedModules(types.ModuleType):
    """A package whose old submodule names resolve (with the warning) as attributes, and whose `kept`
    attributes (a function named like an old module, ``leap_gym.evaluate``) an old-path import cannot replace."""

    moved_children: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        if name in type(self).moved_children:
            return importlib.import_module(f"{self.__name__}.{name}")
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).kept and isinstance(value, types.ModuleType) and name in self.__dict__:
            return
        super().__setattr__(name, value)


def install_moved_modules(package: str, moved: dict[str, str | tuple[str, ...]], kept: tuple[str, ...] = ()) -> None:
    """Make each old dotted name in `moved` import its new module (or modules) with a `DeprecationWarning`.

    Args:
        package: the package the old names are in (``"leap_gym"``); its module gets the old names as attributes.
        moved: old dotted name to its new one, or to the new modules its contents were split across, first
            the one named in the warning.
        kept: attributes of the package that an import of an old path of the same name must not replace.
    """
    sys.meta_path.insert(0, _MovedModuleFinder(moved))
    module = sys.modules[package]
    children = frozenset(old[len(package) + 1:] for old in moved if old.count(".") == package.count(".") + 1)
    if isinstance(module, _PackageWithMovedModules):
        return
    module.__class__ = type("Package", (_PackageWithMovedModules,), {"moved_children": children,
                                                                      "kept": frozenset(kept)})
