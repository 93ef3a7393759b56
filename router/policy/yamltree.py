"""The YAML node tree of a policy before validation: structural checks no schema can see
(custom tags, duplicate keys, recursive aliases, alias bombs) and ``${VAR}`` /
``${VAR:-default}`` substitution in scalar values, each problem a :class:`PolicyProblem` with
its line, and plain words for PyYAML's own syntax errors (:func:`yaml_hint`) (used by
:func:`router.policy.loader.parse_policy`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import yaml

from router.policy.locate import loc_text

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class PolicyProblem:
    """One problem: ``line`` is 1-based (0 when unknown), ``path`` like ``routes[3].backends[1]``."""

    line: int
    path: str
    message: str


#: Most YAML nodes a policy may expand to (aliases counted at every use): a guard against
#: "billion laughs" alias bombs, far above any real policy.
MAX_NODES = 100_000
_STANDARD_TAG = "tag:yaml.org,2002:"


def check_tree(root: yaml.Node) -> list[PolicyProblem]:
    """Structural problems no schema can see: custom tags, duplicate keys, recursive
    aliases and alias bombs."""
    problems: list[PolicyProblem] = []
    visits = 0
    stack: list[tuple[yaml.Node, tuple, frozenset]] = [(root, (), frozenset())]
    while stack:
        node, path, ancestors = stack.pop()
        visits += 1
        if visits > MAX_NODES:
            return [PolicyProblem(root.start_mark.line + 1, "",
                                  f"the document expands to more than {MAX_NODES} nodes (alias bomb?)")]
        line = node.start_mark.line + 1
        if id(node) in ancestors:
            return [PolicyProblem(line, loc_text(path), "recursive alias")]
        if not node.tag.startswith(_STANDARD_TAG):
            problems.append(PolicyProblem(line, loc_text(path), f"unsupported YAML tag '{node.tag}'"))
            continue
        inner = ancestors | {id(node)}
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        problems.append(PolicyProblem(key.start_mark.line + 1, loc_text(path + (key.value,)),
                                                      f"duplicate key '{key.value}'"))
                    seen.add(key.value)
                stack.append((value, path + (getattr(key, "value", "?"),), inner))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, path + (i,), inner) for i, item in enumerate(node.value))
    return problems


def with_env(env_problems: list[PolicyProblem], problems: list[PolicyProblem]) -> list[PolicyProblem]:
    """``env_problems`` and the ``problems`` that are not about their empty values, in file
    order (stable)."""
    merged = [*env_problems, *(p for p in problems if not any(_about(p, e) for e in env_problems))]
    merged.sort(key=lambda p: p.line)
    return merged


def _about(problem: PolicyProblem, env: PolicyProblem) -> bool:
    # The empty value's own problems: at its path or below, or (same line) at a mapping that
    # holds it. Not every problem of its line: a flow mapping ({name: a, kind: ..., api_key:
    # ${KEY}}) puts a whole backend on one line, and its other fields' errors are real.
    if problem.path == env.path or problem.path.startswith((env.path + ".", env.path + "[")):
        return True
    return problem.line == env.line and (problem.path == "" or env.path.startswith((problem.path + ".",
                                                                                     problem.path + "[")))


def substitute_env(node: yaml.Node, path: tuple, problems: list[PolicyProblem]) -> None:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in the scalar values under ``node`` (in place),
    adding a problem for each unset variable (its value becomes "") and malformed reference."""
    if isinstance(node, yaml.ScalarNode):
        if "${" not in node.value:
            return

        def repl(m: re.Match) -> str:
            value = os.environ.get(m.group(1), m.group(2))
            if value is None:
                problems.append(PolicyProblem(node.start_mark.line + 1, loc_text(path),
                                              f"environment variable {m.group(1)} is not set"))
                return ""
            return value

        node.value = _ENV.sub(repl, node.value)
        if "${" in node.value:
            problems.append(PolicyProblem(node.start_mark.line + 1, loc_text(path),
                                          "malformed ${VAR} reference (names: letters, digits, _; not starting "
                                          "with a digit)"))
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            substitute_env(value, path + (key.value,), problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            substitute_env(item, path + (i,), problems)


def yaml_hint(exc: yaml.YAMLError) -> str | None:
    """Plain words for the PyYAML errors a hand-edited policy runs into most ("expected
    <block end>, but found '<block mapping start>'" is a mis-indented key), or ``None``."""
    problem = str(getattr(exc, "problem", "") or "")
    context = str(getattr(exc, "context", "") or "")
    opened = getattr(exc, "context_mark", None)
    at = f" at line {opened.line + 1}" if opened is not None else ""
    if problem.startswith("found character '\\t'"):  # PyYAML writes the tab as \t
        return "a tab: YAML indents with spaces only"
    if "flow sequence" in context:
        return f"the '[' opened{at} is not closed, or an item in it is not followed by ','"
    if "flow mapping" in context:
        return f"the '{{' opened{at} is not closed, or an item in it is not followed by ','"
    if "quoted scalar" in context:
        return f"the quote opened{at} is not closed"
    if problem.startswith("expected <block end>"):
        return "this line is indented differently from the keys before it: keys of one mapping start in the same column"
    if problem == "mapping values are not allowed here":
        return ("a 'key: value' where a plain value was expected: this line is indented deeper than the key "
                "before it, or a value that holds ': ' needs quotes")
    if problem == "sequence entries are not allowed here":
        return "a '- item' on the line of its key: a list starts on the line below its key, or is written [a, b]"
    return None
