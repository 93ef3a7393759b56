"""A small renderer for the subset of Helm's Go templates that the mixroute chart uses.

No helm binary can be installed here, so the tests render ``deploy/helm/mixroute`` with this
module and validate the result. It implements Go ``text/template`` semantics for exactly
what the chart's templates use, and raises :class:`TemplateError` on anything else, so a
template that strays outside the subset fails the tests instead of rendering wrongly:

- actions ``{{ pipeline }}`` with whitespace trimming ``{{-`` / ``-}}`` and ``{{/* comments */}}``;
- ``if`` / ``else if`` / ``else`` / ``end``, ``range`` (over a list, with or without
  ``$item :=``; ``.`` is rebound), ``define`` (in ``_*.tpl`` files), ``$var := pipeline``;
- values: ``.A.B`` from the dot, ``$``, ``$var.A``, string/int/bool literals, ``( ... )``;
- functions: Helm's ``include``, ``required``, ``fail``, ``default``, ``quote``, ``toYaml``,
  ``indent``, ``nindent``, ``trunc``, ``trimSuffix``, ``printf`` (``%s``/``%d``/``%v``), ``not``,
  ``and``, ``or``, ``eq``, ``ne``, ``empty``, ``toString``, ``int``, ``replace``, ``lower``.

Helm semantics kept: a missing value renders as the empty string (Helm drops ``<no
value>``); ``toYaml`` sorts keys and drops its trailing newline; ``required`` fails on nil
and on the empty string; Go truthiness (empty string, 0, empty list/map, nil are false).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+)|(?P<lp>\()|(?P<rp>\))|(?P<pipe>\|)'
                    r"|(?P<word>[^\s()|]+))")


class TemplateError(Exception):
    """A template uses something outside the supported subset, or ``required``/``fail`` fired."""


@dataclass
class Node:
    kind: str  # text | action | if | range | define | assign
    text: str = ""
    expr: str = ""
    var: str | None = None
    body: list = field(default_factory=list)
    orelse: list = field(default_factory=list)


def _lex(source: str) -> list[tuple[str, str]]:
    """Split into ("text", s) and ("action", s) pieces, applying the trim markers."""
    out: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(source):
        text = source[pos:m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", m.group(2).strip()))
        trim_next = bool(m.group(3))
        pos = m.end()
    tail = source[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def parse(source: str) -> tuple[list[Node], dict[str, list[Node]]]:
    """Parse ``source`` into a node list and the ``define`` blocks it declares."""
    defines: dict[str, list[Node]] = {}
    pieces = _lex(source)
    pos = 0

    def block(stop: tuple[str, ...]) -> tuple[list[Node], str]:
        nonlocal pos
        nodes: list[Node] = []
        while pos < len(pieces):
            kind, s = pieces[pos]
            pos += 1
            if kind == "text":
                if s:
                    nodes.append(Node("text", text=s))
                continue
            if s.startswith("/*"):
                continue
            word = s.split(None, 1)[0] if s else ""
            rest = s[len(word):].strip()
            if word in stop:
                return nodes, s
            if word == "if":
                nodes.append(_if(rest))
            elif word == "range":
                var, expr = None, rest
                m = re.match(r"(\$\w+)\s*:=\s*(.*)", rest, re.DOTALL)
                if m:
                    var, expr = m.group(1), m.group(2)
                body, end = block(("end",))
                if end != "end":
                    raise TemplateError("range without end")
                nodes.append(Node("range", expr=expr, var=var, body=body))
            elif word == "define":
                name = _literal(rest)
                body, end = block(("end",))
                defines[name] = body
            elif word in ("with", "template", "block", "else", "end"):
                raise TemplateError(f"unsupported or unbalanced action: {{{{ {s} }}}}")
            elif re.match(r"\$\w+\s*:?=", s):
                var, expr = re.match(r"(\$\w+)\s*:?=\s*(.*)", s, re.DOTALL).groups()
                nodes.append(Node("assign", var=var, expr=expr))
            else:
                nodes.append(Node("action", expr=s))
        if stop:
            raise TemplateError(f"missing {{{{ end }}}} (expected one of {stop})")
        return nodes, ""

    def _if(cond: str) -> Node:
        body, end = block(("end", "else"))
        node = Node("if", expr=cond, body=body)
        if end.startswith("else"):
            rest = end[4:].strip()
            if rest.startswith("if "):
                node.orelse = [_if(rest[3:].strip())]
            else:
                node.orelse, end2 = block(("end",))
                if end2 != "end":
                    raise TemplateError("if/else without end")
        return node

    nodes, _ = block(())
    return nodes, defines


def _literal(s: str) -> str:
    m = re.fullmatch(r'\s*"((?:[^"\\]|\\.)*)"\s*', s)
    if not m:
        raise TemplateError(f"expected a string literal, got {s!r}")
    return bytes(m.group(1), "utf-8").decode("unicode_escape")


def truthy(v: Any) -> bool:
    """Go template truthiness: nil, false, 0, "" and empty lists/maps are false."""
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, (str, list, dict, tuple)):
        return len(v) > 0
    return True


def to_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        raise TemplateError(f"printing a map or list directly ({v!r}); use toYaml")
    return str(v)


def _indent(n: int, s: Any) -> str:
    pad = " " * int(n)
    return "\n".join(pad + line for line in to_text(s).split("\n"))


def _required(msg: str, v: Any) -> Any:
    if v is None or v == "":
        raise TemplateError(f"execution error: {msg}")
    return v


def _fail(msg: str) -> None:
    raise TemplateError(f"execution error: {msg}")


def _to_yaml(v: Any) -> str:
    if v is None:
        return "null"
    return yaml.safe_dump(v, sort_keys=True, default_flow_style=False).rstrip("\n").removesuffix("\n...")


def _printf(fmt: str, *args: Any) -> str:
    it = iter(args)
    return re.sub(r"%[svd]", lambda m: to_text(next(it)), fmt)


def _and(*args: Any) -> Any:
    for a in args:
        if not truthy(a):
            return a
    return args[-1]


def _or(*args: Any) -> Any:
    for a in args:
        if truthy(a):
            return a
    return args[-1]


FUNCS = {
    "required": _required, "fail": _fail, "quote": lambda *v: " ".join('"' + to_text(x).replace("\\", "\\\\")
                                                                         .replace('"', '\\"') + '"' for x in v),
    "default": lambda d, v=None: v if truthy(v) else d, "toYaml": _to_yaml, "indent": _indent,
    "nindent": lambda n, s: "\n" + _indent(n, s), "trunc": lambda n, s: to_text(s)[:int(n)],
    "trimSuffix": lambda suf, s: to_text(s).removesuffix(suf), "printf": _printf,
    "not": lambda v: not truthy(v), "and": _and, "or": _or, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "empty": lambda v: not truthy(v), "toString": to_text, "int": lambda v: int(v or 0),
    "replace": lambda old, new, s: to_text(s).replace(old, new), "lower": lambda s: to_text(s).lower(),
}


@dataclass
class Scope:
    dot: Any
    root: Any
    vars: dict[str, Any]


class Renderer:
    """Renders a chart's templates against its values.

    Args:
        defines: every ``define`` block of the chart (``_helpers.tpl``).
    """

    def __init__(self, defines: dict[str, list[Node]]):
        self.defines = defines

    def render(self, nodes: list[Node], scope: Scope) -> str:
        out: list[str] = []
        for n in nodes:
            if n.kind == "text":
                out.append(n.text)
            elif n.kind == "action":
                out.append(to_text(self.eval(n.expr, scope)))
            elif n.kind == "assign":
                scope.vars[n.var] = self.eval(n.expr, scope)
            elif n.kind == "if":
                branch = n.body if truthy(self.eval(n.expr, scope)) else n.orelse
                out.append(self.render(branch, Scope(scope.dot, scope.root, dict(scope.vars))))
            elif n.kind == "range":
                items = self.eval(n.expr, scope) or []
                if not isinstance(items, list):
                    raise TemplateError(f"range over a non-list: {n.expr}")
                for item in items:
                    inner = Scope(item, scope.root, dict(scope.vars))
                    if n.var:
                        inner.vars[n.var] = item
                    out.append(self.render(n.body, inner))
        return "".join(out)

    def eval(self, expr: str, scope: Scope) -> Any:
        tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in _TOKEN.finditer(expr) if m.lastgroup]
        value, rest = self._pipeline(tokens, scope)
        if rest:
            raise TemplateError(f"unexpected {rest[0][1]!r} in {expr!r}")
        return value

    def _pipeline(self, tokens: list, scope: Scope) -> tuple[Any, list]:
        value, tokens = self._command(tokens, scope, None, first=True)
        while tokens and tokens[0][0] == "pipe":
            value, tokens = self._command(tokens[1:], scope, value, first=False)
        return value, tokens

    def _command(self, tokens: list, scope: Scope, piped: Any, first: bool) -> tuple[Any, list]:
        args: list[Any] = []
        head = tokens[0] if tokens else None
        if head is None:
            raise TemplateError("empty command")
        fn = head[1] if head[0] == "word" and re.fullmatch(r"[A-Za-z]\w*", head[1]) and head[1] not in (
            "true", "false", "nil") else None
        if fn is not None:
            tokens = tokens[1:]
        while tokens and tokens[0][0] not in ("pipe", "rp"):
            v, tokens = self._operand(tokens, scope)
            args.append(v)
        if not first:
            args.append(piped)
        if fn is None:
            if len(args) != 1:
                raise TemplateError(f"a non-function command takes one operand, got {args!r}")
            return args[0], tokens
        if fn == "include":
            name, dot = args
            return self.render(self.defines[name], Scope(dot, scope.root, {})), tokens
        if fn not in FUNCS:
            raise TemplateError(f"unsupported function {fn!r}")
        return FUNCS[fn](*args), tokens

    def _operand(self, tokens: list, scope: Scope) -> tuple[Any, list]:
        kind, s = tokens[0]
        if kind == "str":
            return _literal(s), tokens[1:]
        if kind == "num":
            return int(s), tokens[1:]
        if kind == "lp":
            v, rest = self._pipeline(tokens[1:], scope)
            if not rest or rest[0][0] != "rp":
                raise TemplateError("unbalanced parenthesis")
            return v, rest[1:]
        if kind == "word":
            if s in ("true", "false"):
                return s == "true", tokens[1:]
            if s == "nil":
                return None, tokens[1:]
            return self._field(s, scope), tokens[1:]
        raise TemplateError(f"unexpected token {s!r}")

    def _field(self, s: str, scope: Scope) -> Any:
        if s == ".":
            return scope.dot
        if s.startswith("$"):
            name, _, path = s.partition(".")
            if name == "$":
                base = scope.root
            elif name in scope.vars:
                base = scope.vars[name]
            else:
                raise TemplateError(f"undefined variable {name}")
        elif s.startswith("."):
            base, path = scope.dot, s[1:]
        else:
            raise TemplateError(f"unknown identifier {s!r}")
        for part in path.split(".") if path else []:
            if base is None:
                return None
            if not isinstance(base, dict):
                raise TemplateError(f"can't evaluate field {part} in {s!r}: not a map")
            base = base.get(part)
        return base


def render_chart(chart_dir: Path, values: dict, *, release: str = "mixroute", namespace: str = "default"
                 ) -> dict[str, str]:
    """Render every template of ``chart_dir`` (like ``helm template``).

    Args:
        chart_dir: the chart folder (``Chart.yaml``, ``values.yaml``, ``templates/``).
        values: the merged values (see :func:`merge_values`).

    Returns:
        Template path (``templates/x.yaml``) to rendered text; ``_*.tpl`` files are omitted.

    Raises:
        TemplateError: a ``required``/``fail`` fired, or the template leaves the subset.
    """
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    defines: dict[str, list[Node]] = {}
    parsed: dict[str, list[Node]] = {}
    for path in sorted((chart_dir / "templates").iterdir()):
        nodes, defs = parse(path.read_text())
        defines.update(defs)
        if not path.name.startswith("_"):
            parsed[f"templates/{path.name}"] = nodes
    root = {
        "Values": values,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": True},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion")},
    }
    renderer = Renderer(defines)
    return {name: renderer.render(nodes, Scope(root, root, {})) for name, nodes in parsed.items()}


def merge_values(base: dict, override: dict) -> dict:
    """Helm's values merge: maps merge recursively, anything else replaces."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge_values(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
