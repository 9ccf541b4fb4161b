"""The doctor's settings in the project's own ``pyproject.toml``:

.. code-block:: toml

    [tool.jitlab.doctor]
    max_compiles = {train_step = 1, "*" = 3}

``jitlab doctor`` reads the ``pyproject.toml`` of the folder it runs in, or of the
nearest folder above it that has one; ``pytest --jitlab`` reads the one in pytest's root
folder. ``--max-compiles NAME=N`` on the command line replaces the file's budget for the
same NAME. A table that does not parse is one line naming the key, and exit code 2.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jitlab.doctor.budgets import Budget

SECTION = "[tool.jitlab.doctor]"
KEYS = ("max_compiles",)


class ConfigError(ValueError):
    """A ``[tool.jitlab.doctor]`` that cannot be used; the message is one line."""


@dataclasses.dataclass(frozen=True)
class DoctorConfig:
    path: Path | None = None
    budgets: tuple[Budget, ...] = ()


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml``: in ``start`` (the working folder) or above it."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def _budgets(path: Path, table: Any) -> tuple[Budget, ...]:
    where = f"{path}: {SECTION} max_compiles"
    if not isinstance(table, Mapping):
        raise ConfigError(
            f"{where}: expected a table of NAME = N, "
            f'e.g. max_compiles = {{train_step = 1, "*" = 3}}'
        )
    found = []
    for name, limit in table.items():
        if not str(name).strip():
            raise ConfigError(f"{where}: a budget needs a function name or pattern")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(
                f"{where}.{name}: expected a whole number of compilations (0 or more), "
                f"got {limit!r}"
            )
        found.append(Budget(str(name).strip(), limit, f"{path.name} {SECTION}"))
    return tuple(found)


def load(path: Path | None) -> DoctorConfig:
    """The settings in ``path`` (none when there is no file or no section)."""
    if path is None:
        return DoctorConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from None
    section = data.get("tool", {}).get("jitlab", {})
    if not isinstance(section, Mapping):
        raise ConfigError(f"{path}: [tool.jitlab] must be a table")
    section = section.get("doctor")
    if section is None:
        return DoctorConfig(path)
    if not isinstance(section, Mapping):
        raise ConfigError(f"{path}: {SECTION} must be a table")
    unknown = [key for key in section if key not in KEYS]
    if unknown:
        raise ConfigError(
            f"{path}: {SECTION} has an unknown key {unknown[0]!r} (known: {', '.join(KEYS)})"
        )
    return DoctorConfig(path, _budgets(path, section.get("max_compiles", {})))


_SKIPPED = {".venv", "venv", "node_modules", "site-packages", "_build", "build", "dist"}
_DEFINED = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)|^\s*(\w+)\s*(?::[^=]*)?=[^=]", re.M)


def defined_names(root: Path, most_files: int = 5000) -> set[str]:
    """The names a project's Python files define (``def``, ``class``, an assignment at any
    depth), for telling a budget's misspelt name from a function this run did not call.
    Hidden folders, virtual environments and build folders are skipped."""
    names: set[str] = set()
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIPPED]
        for file in files:
            if not file.endswith(".py"):
                continue
            seen += 1
            if seen > most_files:
                return names
            try:
                text = Path(folder, file).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            names.update(a or b for a, b in _DEFINED.findall(text))
    return names


def known_to(root: Path | None, jitted: set[str]) -> Callable[[Budget], bool]:
    """Whether a budget names a function of the project: one jitted in this process, or a
    name its files define (read once, when a budget needs it)."""
    cache: list[set[str]] = []

    def known(budget: Budget) -> bool:
        if any(budget.matches(name, name) for name in jitted):
            return True
        if root is None:
            return False
        if not cache:
            cache.append(defined_names(root))
        return any(budget.matches(name, name) for name in cache[0])

    return known


def merged(config: DoctorConfig, command_line: list[Budget]) -> list[Budget]:
    """The file's budgets, each replaced by a command-line budget for the same name."""
    given = {b.pattern for b in command_line}
    return [b for b in config.budgets if b.pattern not in given] + list(command_line)
