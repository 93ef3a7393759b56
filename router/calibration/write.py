"""Write a calibrated bar into a policy file, keeping the rest of the file as it is.

The route's ``quality_bar`` block (key through its last value line) is replaced by the new
block at the same indentation; a route without one gets it after its last line. Every
other line, comments included, is kept byte for byte. The edit is done on the text with
the line marks of PyYAML's node tree (no round-trip library needed); the result is
validated with :func:`router.policy.load_policy` before it replaces the file (atomically).
Routes written in flow style (``- {name: auto, ...}``) are refused: paste the snippet.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from router.calibration.errors import CalibrationError


def bar_block(bar: dict[str, Any]) -> str:
    """``quality_bar:`` and its mapping as block YAML (no trailing newline)."""
    return yaml.safe_dump({"quality_bar": bar}, sort_keys=False, default_flow_style=False, width=120).rstrip("\n")


def _last_line(node: yaml.Node) -> int:
    """0-based line of the last character of ``node``'s text."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _last_line(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _last_line(node.value[-1])
    end = node.end_mark
    return end.line - 1 if end.column == 0 and end.line > node.start_mark.line else end.line


def _route_node(root: yaml.Node, route: str, path: Path) -> yaml.MappingNode:
    routes = next((v for k, v in getattr(root, "value", []) if isinstance(k, yaml.ScalarNode) and k.value == "routes"),
                  None)
    for item in getattr(routes, "value", []) or []:
        if isinstance(item, yaml.MappingNode) and any(k.value == "name" and v.value == route for k, v in item.value):
            if item.flow_style:
                raise CalibrationError(f"{path}:{item.start_mark.line + 1} route '{route}' is in flow style; "
                                       "paste the printed snippet instead of --write")
            return item
    raise CalibrationError(f"{path}: no route '{route}'")


def edit_text(text: str, route: str, bar: dict[str, Any], path: Path = Path("<policy>")) -> str:
    """``text`` with route ``route``'s ``quality_bar`` replaced by ``bar`` (see the module docstring).

    Raises:
        CalibrationError: no such route, or the route is in flow style.
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    node = _route_node(root, route, path)
    lines = text.splitlines(keepends=True)
    found = next(((k, v) for k, v in node.value if k.value == "quality_bar"), None)
    if found is not None:
        key, value = found
        first, last, col = key.start_mark.line, _last_line(value), key.start_mark.column
        prefix = lines[first][:col]
    else:
        key = node.value[0][0]
        col = key.start_mark.column
        first = last = _last_line(node.value[-1][1])
        first += 1
        prefix = " " * col
    block = bar_block(bar).split("\n")
    new = [prefix + block[0] + "\n"] + [" " * col + b + "\n" for b in block[1:]]
    if last < len(lines) and not lines[last].endswith("\n") and found is None:
        lines[last] += "\n"
    return "".join(lines[:first] + new + lines[last + 1:])


def write_policy(path: Path, route: str, bar: dict[str, Any]) -> None:
    """Replace route ``route``'s bar in the policy file ``path`` (validated, then atomic).

    Raises:
        CalibrationError: unreadable or unwritable file, no such route, or the edited policy
            is invalid (the file is then left unchanged).
    """
    from router.policy import PolicyError, parse_policy

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{path}: cannot read: {exc}") from None
    new = edit_text(text, route, bar, path)
    try:
        parse_policy(new, source=str(path), base_dir=path.parent)
    except PolicyError as exc:
        raise CalibrationError(f"the edited policy would be invalid, {path} left unchanged:\n{exc}") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(new)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except OSError as exc:  # e.g. an immutable or read-only file: the policy is unchanged
        Path(tmp).unlink(missing_ok=True)
        raise CalibrationError(f"{path}: cannot write: {exc.strerror or exc}; the policy is unchanged") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
