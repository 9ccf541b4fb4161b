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
import tomllib
from collections.abc import Mapping
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
        found.append(Budget(str(name).strip(), limit))
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


def merged(config: DoctorConfig, command_line: list[Budget]) -> list[Budget]:
    """The file's budgets, each replaced by a command-line budget for the same name."""
    given = {b.pattern for b in command_line}
    return [b for b in config.budgets if b.pattern not in given] + list(command_line)
