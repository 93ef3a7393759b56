"""Load a policy YAML into a :class:`~router.policy.models.Policy`, with errors that
point at the line: ``policy.yaml:42 routes[3].backends[1]: unknown backend 'gpt5'``.

Steps: parse to a YAML node tree (keeps line marks; :mod:`router.policy.yamltree` checks it)
-> substitute ``${VAR}`` /
``${VAR:-default}`` in scalar values -> validate with pydantic -> check cross-references,
each backend's ``options`` against its kind's typed model
(:func:`backends.registry.options_model`), that replay ``data`` paths exist and that litellm
knows a provider and a price for each hosted ``model`` (:mod:`router.policy.hosted_checks`)
and that chat and embedding backends stay apart (:mod:`router.policy.tasks`), so that a policy that validates also starts.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from router.policy.locate import line_of, loc_text
from router.policy.models import Policy
from router.policy.tasks import task_problems
from router.policy.yamltree import PolicyProblem, check_tree, substitute_env, with_env, yaml_hint


class PolicyError(Exception):
    """The policy file is invalid. ``str()`` gives one ``FILE:LINE path: problem`` per line."""

    def __init__(self, source: str, problems: list[PolicyProblem]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        out = []
        for p in self.problems:
            where = f"{self.source}:{p.line}" if p.line else self.source
            message = " ".join(p.message.splitlines())  # one problem, one line
            out.append(f"{where} {p.path}: {message}" if p.path else f"{where}: {message}")
        return out


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy with its source text and hash (16 hex chars of SHA-256 over
    the canonical JSON of the resolved policy, secrets excluded)."""

    policy: Policy
    text: str
    hash: str
    source: str


def load_policy(path: str | Path) -> LoadedPolicy:
    """Read and validate a policy file.

    Raises:
        PolicyError: unreadable file, bad YAML, schema or cross-reference problems.
    """
    path = Path(path)

    def unreadable(why: str) -> PolicyError:
        return PolicyError(str(path), [PolicyProblem(0, "", f"cannot read file: {why}")])

    try:
        if path.exists() and not path.is_file():  # a folder, a device (/dev/zero never ends), a pipe
            raise unreadable("not a regular file")
        with path.open("rb") as f:
            data = f.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            raise unreadable(f"larger than {MAX_POLICY_BYTES // (1 << 20)} MiB, which no policy needs")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise unreadable(str(exc)) from None
    return parse_policy(text, source=str(path), base_dir=path.parent)


#: Largest policy file read (bytes): a policy is kilobytes; a bigger file is a mistake (a data
#: file given as the policy), and reading it whole would hold the gateway's memory.
MAX_POLICY_BYTES = 8 << 20


def parse_policy(text: str, *, source: str = "<policy>", base_dir: Path | None = None) -> LoadedPolicy:
    """Validate policy text. ``base_dir`` resolves relative replay ``data`` paths.

    Raises:
        PolicyError: see :func:`load_policy`.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is None:
            raise PolicyError(source, [PolicyProblem(1, "", "the file is empty")])
        problems = check_tree(root)
        if problems:
            raise PolicyError(source, problems)
        substitute_env(root, (), problems)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        message = f"invalid YAML: {getattr(exc, 'problem', exc)}"
        if line and "${" in (text.splitlines()[line - 1:line] or [""])[0]:
            # In a flow collection `{`/`}` are YAML's own: `{name: a, api_key: ${KEY}}` reads as
            # a nested mapping, and YAML's message alone ("expected ',' or '}', but got '{'") hides why.
            message += ' (a ${VAR} inside {...} or [...] must be quoted: "${VAR}")'
        elif hint := yaml_hint(exc):
            message += f" ({hint})"
        raise PolicyError(source, [PolicyProblem(line, "", message)]) from None
    except RecursionError:  # a policy is a few levels deep; hundreds of levels are a broken file
        raise PolicyError(source, [PolicyProblem(1, "", "invalid YAML: nested too deeply")]) from None
    # Unset variables are reported with every other problem of the file, not alone: the
    # value they stood in becomes "", and that empty value's own problems are left out as
    # consequences (:func:`router.policy.yamltree.with_env`).
    env_problems = problems
    try:
        data = yaml.SafeLoader(text).construct_document(root)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        mark = getattr(exc, "problem_mark", None)
        raise PolicyError(source, [PolicyProblem(mark.line + 1 if mark else 0, "",
                                                 f"invalid YAML: {getattr(exc, 'problem', None) or exc}")]) from None
    if not isinstance(data, dict):
        raise PolicyError(source, [PolicyProblem(root.start_mark.line + 1, "", "the top level must be a mapping")])
    problems = _huge_integers(data, root)
    if problems:
        raise PolicyError(source, with_env(env_problems, problems))
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(source, with_env(env_problems, _schema_problems(exc, root))) from None
    problems = (_cross_references(policy, root) + _options(policy, root) + _data_paths(policy, root, base_dir)
                + _hosted(policy, root) + _located(root, task_problems(policy)))
    problems = with_env(env_problems, problems)
    if problems:
        raise PolicyError(source, problems)
    if base_dir is not None:
        policy = _resolve_paths(policy, base_dir)
    return LoadedPolicy(policy=policy, text=text, hash=policy_hash(policy), source=source)


def policy_hash(policy: Policy) -> str:
    """16 hex chars of SHA-256 over the canonical JSON of ``policy`` (secrets excluded)."""
    dumped = policy.model_dump(mode="json", exclude={"backends": {"__all__": {"api_key"}}})
    return hashlib.sha256(orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _schema_problems(exc: ValidationError, root: yaml.Node, prefix: tuple = (),
                     known: str = "") -> list[PolicyProblem]:
    """One problem per pydantic error, located at ``prefix + loc``; ``known`` is appended to
    unknown-key messages."""
    problems = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        if loc[-1] == "[key]":  # pydantic's mark of a dict key's own error (an unknown signal name)
            loc = loc[:-1]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key '{loc[-1]}'{known}"
        problems.append(PolicyProblem(line_of(root, loc), loc_text(loc), msg))
    return problems


def _cross_references(policy: Policy, root: yaml.Node) -> list[PolicyProblem]:
    problems: list[PolicyProblem] = []

    def add(loc: tuple, msg: str) -> None:
        problems.append(PolicyProblem(line_of(root, loc), loc_text(loc), msg))

    seen: set[str] = set()
    for i, b in enumerate(policy.backends):
        if b.name in seen:
            add(("backends", i, "name"), f"duplicate backend name '{b.name}'")
        seen.add(b.name)
    known = ", ".join(dict.fromkeys(b.name for b in policy.backends))  # each name once, duplicates included
    routes: set[str] = set()
    for i, r in enumerate(policy.routes):
        if r.name in routes:
            add(("routes", i, "name"), f"duplicate route name '{r.name}'")
        if r.name in seen:
            add(("routes", i, "name"), f"route name '{r.name}' is also a backend name")
        routes.add(r.name)
        for j, name in enumerate(r.backends):
            if name not in seen:
                add(("routes", i, "backends", j), f"unknown backend '{name}' (known: {known})")
            elif name in r.backends[:j]:
                add(("routes", i, "backends", j), f"backend '{name}' is listed twice")
    if policy.default_route not in routes:
        add(("default_route",), f"unknown route '{policy.default_route}' (known: {', '.join(sorted(routes))})")
    rule_names: set[str] = set()
    tags = {t for b in policy.backends for t in b.tags}
    for i, rule in enumerate(policy.rules):
        reported = len(problems)
        if rule.name in rule_names:
            add(("rules", i, "name"), f"duplicate rule name '{rule.name}'")
        rule_names.add(rule.name)
        for j, name in enumerate(rule.routes):
            if name not in routes:
                add(("rules", i, "routes", j), f"unknown route '{name}'")
        missing = [t for t in rule.require_tags if t not in tags]
        if missing:
            add(("rules", i, "require_tags"), f"no backend has the tag(s) {', '.join(map(repr, missing))}: "
                                              "every request the rule matches would have no candidate")
        elif rule.require_tags:
            # The backends the rule can leave: its routes' (or all), plus any route_to target.
            names = ({n for r in policy.routes if r.name in rule.routes for n in r.backends} if rule.routes
                     else {b.name for b in policy.backends}) | {r.route_to for r in policy.rules if r.route_to}
            if not any(set(rule.require_tags) <= set(b.tags) for b in policy.backends if b.name in names):
                where = f"of routes {', '.join(rule.routes)} " if rule.routes else ""
                add(("rules", i, "require_tags"), f"no backend {where}has all of the tags {rule.require_tags}: "
                                                  "every request the rule matches would have no candidate")
        if rule.route_to is not None and rule.route_to not in seen:
            add(("rules", i, "route_to"), f"unknown backend '{rule.route_to}' (known: {known})")
        if rule.route_to is not None:
            # The first matching route_to wins (router.rules.apply_rules): an earlier rule with
            # the very same conditions leaves this one nothing to route.
            first = next((r for r in policy.rules[:i] if r.route_to and _conditions(r) == _conditions(rule)), None)
            if first is not None and first.route_to != rule.route_to:
                add(("rules", i, "route_to"), f"never takes effect: rule '{first.name}' has the same conditions and "
                                              f"routes to '{first.route_to}' first (the first matching route_to wins)")
        for j, name in enumerate(rule.allow_backends):
            if name not in seen:
                add(("rules", i, "allow_backends", j), f"unknown backend '{name}' (known: {known})")
        if len(problems) == reported:  # a rule with a problem of its own is not judged on its filters too
            _leaves_none(policy, i, add)
    for name in (policy.learning.prior_weights if policy.learning else {}):
        if name not in seen:
            add(("learning", "prior_weights", name), f"unknown backend '{name}' (known: {known})")
    judge = policy.learning.judge if policy.learning else None
    if judge is not None and judge.backend not in seen:
        add(("learning", "judge", "backend"), f"unknown backend '{judge.backend}' (known: {known})")
    return problems


def _leaves_none(policy: Policy, i: int, add) -> None:
    """Rule ``i``'s filters together with those of the earlier rules that have the very same
    conditions (so they always match together: :func:`router.rules.apply_rules` applies
    every ``allow_backends`` and ``require_tags`` of the matching rules) leave no backend
    for any request they match. The backends they can filter are those of the rule's routes
    (all routes without ``routes``) and every ``route_to`` target of the policy (another
    rule may have replaced the candidates first), or only the group's first ``route_to``
    when the group has one (it replaces the candidates whenever the group matches)."""
    rule = policy.rules[i]
    group = [r for r in policy.rules[:i] if _conditions(r) == _conditions(rule)] + [rule]
    if not any(r.allow_backends or r.require_tags for r in group):
        return
    own = next((r.route_to for r in group if r.route_to), None)
    scope = [r for r in policy.routes if r.name in rule.routes] if rule.routes else list(policy.routes)
    names = {own} if own else ({n for r in scope for n in r.backends} | {r.route_to for r in policy.rules if r.route_to})
    tags = {t for r in group for t in r.require_tags}
    left = [b.name for b in policy.backends if b.name in names and tags <= set(b.tags)
            and all(b.name in r.allow_backends for r in group if r.allow_backends)]
    if left:
        return
    others = [r.name for r in group if r is not rule]
    together = f" with rule(s) {', '.join(others)} (same conditions)" if others else ""
    where = f"'route_to: {own}'" if own else (f"routes {', '.join(rule.routes)}" if rule.routes else "any route")
    add(("rules", i), f"its filters{together} leave no backend of {where}: every request the rule matches "
                      "would have no candidate")


def _conditions(rule: Any) -> tuple:
    """What decides whether ``rule`` matches a request (routes and tenants as sets)."""
    return (frozenset(rule.routes), frozenset(rule.tenants), (rule.when_header or "").lower(),
            tuple(sorted(rule.when_signal.items())), tuple(sorted(rule.when_signal_below.items())))


def _huge_integers(data: Any, root: yaml.Node) -> list[PolicyProblem]:
    """Integers outside the signed 64-bit range: no setting needs one, and the policy hash
    (canonical JSON through orjson) cannot encode them."""
    problems: list[PolicyProblem] = []
    stack: list[tuple[Any, tuple]] = [(data, ())]
    while stack:
        node, loc = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, loc + (k,)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, loc + (i,)) for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and not -(2**63) <= node < 2**63:
            problems.append(PolicyProblem(line_of(root, loc), loc_text(loc), "number out of range (at most 2**63 - 1)"))
    problems.sort(key=lambda p: p.line)
    return problems


def _options(policy: Policy, root: yaml.Node) -> list[PolicyProblem]:
    """Each backend's ``options`` checked against its kind's typed model (the model the
    backend itself validates them with when it is built)."""
    from backends.registry import options_model  # options models only: no transport imported

    problems: list[PolicyProblem] = []
    for i, b in enumerate(policy.backends):
        model = options_model(b.kind)
        if model is None:
            continue
        try:
            model.model_validate(b.options)
        except ValidationError as exc:
            names = ", ".join(model.model_fields)
            known = f" (known: {names})" if names else f" (a {b.kind} backend takes no options)"
            problems += _schema_problems(exc, root, ("backends", i, "options"), known)
    return problems


def _located(root: yaml.Node, problems: list[tuple[tuple, str]]) -> list[PolicyProblem]:
    """``(location, message)`` pairs as problems at their lines."""
    return [PolicyProblem(line_of(root, loc), loc_text(loc), msg) for loc, msg in problems]


def _hosted(policy: Policy, root: yaml.Node) -> list[PolicyProblem]:
    """:func:`router.policy.hosted_checks.hosted_problems` at their lines (it imports litellm
    only when the policy has a hosted backend)."""
    from router.policy.hosted_checks import hosted_problems

    return [PolicyProblem(line_of(root, loc), loc_text(loc), msg) for loc, msg in hosted_problems(policy)]


def _data_paths(policy: Policy, root: yaml.Node, base_dir: Path | None) -> list[PolicyProblem]:
    """Replay ``data`` paths that do not exist, resolved as the backend opens them: relative
    to ``base_dir`` (the policy file's folder) when given, else to the working directory."""
    problems: list[PolicyProblem] = []
    for i, b in enumerate(policy.backends):
        if b.kind != "replay":
            continue
        for j, p in enumerate(b.data):
            path = p if p.is_absolute() or base_dir is None else base_dir / p
            loc = ("backends", i, "data", j)
            if not os.path.exists(path):  # False, not an error, for unreadable or invalid names
                problems.append(PolicyProblem(line_of(root, loc), loc_text(loc), f"file not found: {path}"))
                continue
            reason = _data_format_problem(Path(path))
            if reason:
                problems.append(PolicyProblem(line_of(root, loc), loc_text(loc), reason))
    return problems


def _data_format_problem(path: Path) -> str | None:
    """Why the replay backend could not read ``path``, from a cheap look
    (:func:`backends.data.loader.sniff`: each file's first 256 KiB), or ``None``. Content
    errors deeper in a file still surface when the backend loads it."""
    from backends.data import DataFormatError
    from backends.data.loader import sniff

    try:
        sniff(path)
    except DataFormatError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    return None


def _resolve_paths(policy: Policy, base_dir: Path) -> Policy:
    backends = [
        b.model_copy(update={"data": [p if p.is_absolute() else (base_dir / p) for p in b.data]}) if b.data else b
        for b in policy.backends
    ]
    return policy.model_copy(update={"backends": backends})


def check_replay_data(loaded: LoadedPolicy) -> None:
    """Load the data of every ``replay`` backend and check that its ``model`` is one of the
    data's models: the part of validation that reads whole data files, so it runs where a
    policy is about to serve (``mixroute serve``, a reload, ``mixroute policy validate``),
    not on every parse. The data lands in the per-process cache the backends read
    (:func:`backends.replay.index.load_index`).

    Raises:
        PolicyError: at the backend's ``model`` line (a model not in its data, with the data's
            models) or ``data`` line (content the loader refuses).
    """
    from backends.data import DataFormatError
    from backends.replay.index import ModelNotInData, load_model_index

    root = None
    problems: list[PolicyProblem] = []
    for i, b in enumerate(loaded.policy.backends):
        if b.kind != "replay":
            continue
        try:
            load_model_index(b.data, b.name, b.model)
            continue
        except ModelNotInData as exc:
            loc, message = ("backends", i, "model"), (f"model {exc.model!r} is not in the backend's data "
                                                      f"(models: {', '.join(exc.models)})")
        except DataFormatError as exc:
            loc, message = ("backends", i, "data"), str(exc)
        if root is None:
            root = yaml.compose(loaded.text, Loader=yaml.SafeLoader)
        problems.append(PolicyProblem(line_of(root, loc), loc_text(loc), message))
    if problems:
        raise PolicyError(loaded.source, problems)
