"""Bring your own code: import a model class shipped inside its model directory.

A custom model directory holds its code next to `model.yaml`:

    sentiment/
      model.yaml      runtime: custom, model_class: "model:SentimentModel"
      model.py        class SentimentModel(podserve.runtimes.ModelAPI)
      weights.npy

`model_class: "module:Class"` names `module.py` (or a package `module/__init__.py`) in the
model directory. It is imported from that file under a name unique to the directory,
without touching `sys.path`: two models may both ship a `model.py`, and a model's code can
never shadow an installed package. A package may use relative imports (`from . import x`)
to reach its other files. When the directory holds no such module, the path is imported
from the installed packages instead (`my_package.models:MyModel`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from podserve.core.errors import ModelLoadFailed


def import_model_class(path: str, directory: Path | None) -> object:
    """Resolve `module:Class` from `directory` if it ships that module, else from installed
    packages."""
    module_name, attr = _split(path)
    if directory is not None and _module_file(directory, module_name) is not None:
        return load_class_from_directory(directory, path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        where = f" (and {directory} has no {module_name}.py)" if directory else ""
        raise ModelLoadFailed(f"cannot import {module_name!r}{where}: {exc}") from exc
    return _attribute(module, module_name, attr)


def load_class_from_directory(directory: Path, path: str) -> object:
    """Import `module.py` (or `module/__init__.py`) from `directory` and return `Class`.

    Each call compiles and executes the module afresh from its source (no bytecode cache),
    so reloading a model always picks up edited code.
    """
    module_name, attr = _split(path)
    file = _module_file(directory, module_name)
    if file is None:
        raise ModelLoadFailed(
            f"model_class {path!r}: {directory} has no {module_name}.py "
            f"or {module_name}/__init__.py"
        )
    unique = _unique_name(directory, module_name)
    # Drop what an earlier load of this directory left behind, submodules included, so
    # the code runs as it is on disk now.
    for name in [n for n in sys.modules if n == unique or n.startswith(unique + ".")]:
        del sys.modules[name]
    is_package = file.name == "__init__.py"
    if is_package:
        _import_fresh_from(file.parent)
    spec = importlib.util.spec_from_file_location(
        unique,
        file,
        loader=FreshSourceLoader(unique, str(file)),
        submodule_search_locations=[str(file.parent)] if is_package else None,
    )
    if spec is None or spec.loader is None:
        raise ModelLoadFailed(f"cannot import {file}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as `import` does: dataclasses, pickle and relative imports
    # look the module up by name while it executes.
    sys.modules[unique] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[unique]
        raise ModelLoadFailed(f"importing {file} failed: {type(exc).__name__}: {exc}") from exc
    return _attribute(module, str(file), attr)


class FreshSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the source on every load and never reads or writes `__pycache__`.

    CPython trusts a cached `.pyc` whose recorded source mtime (whole seconds) and size match
    the file: code edited within the same second to the same length would silently run the
    old bytecode after a reload. Without source stats, `SourceLoader.get_code` skips the
    cache both ways (CPython Lib/importlib/_bootstrap_external.py, `get_code`).
    """

    def path_stats(self, path: str) -> Mapping[str, Any]:
        raise OSError("podserve compiles model code from source on every load")


def _import_fresh_from(package_dir: Path) -> None:
    """Submodules of a model package (`from . import impl`) are found by the path finder
    through `sys.path_importer_cache`: give each of the package's directories a new finder
    (no stale directory listing) whose source loader is `FreshSourceLoader`."""
    loader_details = (FreshSourceLoader, importlib.machinery.SOURCE_SUFFIXES)
    directories = [package_dir, *(init.parent for init in package_dir.rglob("*/__init__.py"))]
    for folder in directories:
        sys.path_importer_cache[str(folder)] = importlib.machinery.FileFinder(
            str(folder), loader_details
        )


def _split(path: str) -> tuple[str, str]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ModelLoadFailed(f"model_class {path!r} must look like 'module:Class'")
    return module_name, attr


def _module_file(directory: Path, module_name: str) -> Path | None:
    if not module_name.isidentifier():
        # A dotted path names an installed package, never a file in the model directory.
        return None
    for candidate in (directory / f"{module_name}.py", directory / module_name / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _unique_name(directory: Path, module_name: str) -> str:
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:12]
    return f"podserve_model_{digest}_{module_name}"


def _attribute(module: ModuleType, where: str, attr: str) -> object:
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ModelLoadFailed(f"{where} has no attribute {attr!r}") from None
