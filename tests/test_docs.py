"""The README and docs/ stay readable and true to the code: the README is short, its table
cells are phrases, every relative link resolves, and every setting is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.observability.settings import ObservabilitySettings
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))

README_MAX_WORDS = 1500
CELL_MAX_WORDS = 25

# Pages the README links that another branch is writing (the doors' security notes). A link
# to one passes while the file is absent; once it exists it is checked like any other.
PENDING_PAGES: set = set()

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link-like string in code is not a link)."""
    return _FENCE.sub("", text)


def _table_cells(text: str) -> list[str]:
    cells = []
    for line in _prose(text).splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        row = [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]
        if all(re.fullmatch(r":?-{3,}:?", c) for c in row):
            continue  # the header's separator row
        cells.extend(row)
    return cells


def _words(text: str) -> int:
    return len(text.split())


def test_readme_is_short() -> None:
    words = _words(README.read_text(encoding="utf-8"))
    assert words < README_MAX_WORDS, f"README.md has {words} words (wc -w); keep it under {README_MAX_WORDS}: move detail to docs/"


def test_readme_table_cells_are_phrases() -> None:
    long = [c for c in _table_cells(README.read_text(encoding="utf-8")) if _words(c) >= CELL_MAX_WORDS]
    assert not long, f"README table cells of {CELL_MAX_WORDS}+ words: {long}"


def test_table_cell_helper_sees_cells() -> None:
    text = "| a | b |\n| --- | --- |\n| `x \\| y` | one two three |\n```\n| not | a table |\n```\n"
    assert _table_cells(text) == ["a", "b", "`x \\| y`", "one two three"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation other than hyphens
    and underscores dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", _prose(page.read_text(encoding="utf-8")), re.M)
    return {_slug(h) for h in headings}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # a URL (http:, mailto:)
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            if path not in PENDING_PAGES:
                broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files or headings: {broken}"


def test_slug_matches_github() -> None:
    assert _slug("Gateway overhead, side by side (issue 9)") == "gateway-overhead-side-by-side-issue-9"
    assert _slug("Willingness to pay against `target`") == "willingness-to-pay-against-target"
    assert _slug("Quality bars on RouterBench: calibration and the replay target") == \
        "quality-bars-on-routerbench-calibration-and-the-replay-target"


def test_link_pattern_skips_images_and_finds_links() -> None:
    text = "see [docs](docs/API.md#x) and ![img](a.png) and [web](https://example.com)"
    assert _LINK.findall(text) == ["docs/API.md#x", "https://example.com"]


def _setting_names() -> set[str]:
    names = {f"MIXROUTE_{name.upper()}" for name in Settings.model_fields}
    for field in ObservabilitySettings.model_fields.values():
        names.update(field.validation_alias.choices)
    return names


def test_every_setting_is_documented() -> None:
    settings_doc = (ROOT / "docs" / "SETTINGS.md").read_text(encoding="utf-8")
    missing = sorted(name for name in _setting_names() if f"`{name}`" not in settings_doc)
    assert not missing, f"settings missing from docs/SETTINGS.md (add a row each): {missing}"


def test_documented_variables_exist() -> None:
    """A ``MIXROUTE_*`` name in the README or docs is a setting or one of the tools'
    variables that docs/SETTINGS.md lists under "Not process settings"."""
    settings_doc = (ROOT / "docs" / "SETTINGS.md").read_text(encoding="utf-8")
    tools = set(re.findall(r"`(MIXROUTE_[A-Z0-9_]+)`", settings_doc.split("## Not process settings", 1)[1]))
    known = _setting_names() | tools
    unknown = sorted({f"{page.relative_to(ROOT)}: {name}" for page in [README, *DOCS]
                      for name in re.findall(r"\bMIXROUTE_[A-Z0-9_]*[A-Z0-9]\b", page.read_text(encoding="utf-8"))
                      if name not in known})
    assert not unknown, f"variables no code reads (a typo, or a removed setting): {unknown}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_doc_pages_open_with_what_they_cover(page: Path) -> None:
    lines = [line for line in page.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines and lines[0].startswith("# "), f"{page.name} should start with a '# Title' line"
    first = lines[1] if len(lines) > 1 else ""
    assert not first.startswith(("#", "```", "|", "- ")), (
        f"{page.name}: open with a few lines saying what the page covers, not with {first[:40]!r}")


# Run history and machine names belong in docs/BENCHMARKS.md, next to the command that
# produced the figure; reference docs, docstrings and comments carry none.
_HISTORY = re.compile(r"\b(EPYC|Xeon|Zen [0-9]|Sapphire Rapids|session [0-9]+)\b")
_CODE_DIRS = ("gateway", "router", "backends", "adapters")


def test_run_history_only_in_benchmarks() -> None:
    pages = [README, *(p for p in DOCS if p.name != "BENCHMARKS.md")]
    sources = [p for d in _CODE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
            for p in pages + sources
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if _HISTORY.search(line)]
    assert not hits, "machine names or session history outside docs/BENCHMARKS.md:\n" + "\n".join(hits)


def test_history_pattern_catches_machine_and_session() -> None:
    assert _HISTORY.search("measured on a 2-vCPU AMD EPYC Zen 2")
    assert _HISTORY.search("since session 20")
    assert not _HISTORY.search("a session's prefix; sessions: 3")


def _readme_commands() -> list[str]:
    """Every ``mixroute ...`` command line written in the README (code spans and blocks)."""
    text = README.read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+)`", _prose(text)) + re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M)
    lines = [line.split("#", 1)[0].strip() for span in spans for line in span.splitlines()]
    return [line for line in lines if line.startswith("mixroute ")]


def test_readme_commands_exist() -> None:
    """Each README command names a real subcommand and only options that command takes."""
    import typer.main

    from gateway.cli import app

    root = typer.main.get_command(app)
    commands = _readme_commands()
    assert len(commands) >= 8, commands  # the quickstart, the two commands, the table
    wrong = []
    for line in commands:
        words = line.replace("[", " ").replace("]", " ").split()[1:]
        command = root
        while words and words[0] in getattr(command, "commands", {}):
            command = command.commands[words.pop(0)]
        if hasattr(command, "commands"):  # a group: fine alone (`mixroute keys`), else unknown
            if words:
                wrong.append(f"{line}: no such command")
            continue
        options = {opt for p in command.params for opt in p.opts + p.secondary_opts}
        wrong += [f"{line}: {w}" for w in words if w.startswith("--") and w.split("=")[0] not in options]
    assert not wrong, f"README commands the CLI does not take: {wrong}"
