"""Where in a policy's YAML a problem is: the line of a pydantic ``loc`` path in the node
tree, and the path written as the messages show it (``routes[3].backends[1]``)."""

from __future__ import annotations

import yaml


def line_of(root: yaml.Node, loc: tuple) -> int:
    """1-based line of the deepest node of ``loc`` present in the YAML tree; for a mapping
    value that is an alias (``extra: *base``), the line of its key: the node itself is the
    anchor's, lines earlier."""
    node, line = root, root.start_mark.line
    for part in loc:
        child, key = None, None
        if isinstance(node, yaml.MappingNode):
            key, child = next(((k, v) for k, v in node.value if _is_key(k, part)), (None, None))
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
        line = key.start_mark.line if key is not None and child.start_mark.line < key.start_mark.line \
            else child.start_mark.line
    return line + 1


def _is_key(key: yaml.Node, part: object) -> bool:
    if isinstance(part, str) and key.value == part:
        return True
    # pydantic names a non-string key by its Python value (``1: 2`` as 1, ``yes: 1`` as 1,
    # ``~: x`` as 'None'); a quoted key is a string and was matched above
    if not isinstance(key, yaml.ScalarNode) or key.style or key.tag == "tag:yaml.org,2002:str":
        return False
    try:
        value = yaml.safe_load(key.value)
    except yaml.YAMLError:
        return False
    return value == part or str(value) == part


def loc_text(loc: tuple) -> str:
    """``loc`` as problems show it: ``routes[3].backends[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
