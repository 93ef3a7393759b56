"""``mixroute eval --adapters-version V``: compare an adapter version with the live one on
held-out logs, off-policy (:mod:`router.eval.versions`).

The held-out logs are the requests decided at or after the version's ``holdout_from``
(``mixroute train --from-logs --holdout``); a version that held nothing out is compared
on every logged request, with a note that it was trained on them.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import typer


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _baked(versions, version: str):
    from router.learning.baked import OUTCOMES_FILE, Baked, BakedError

    folder = versions.folder(version)
    if folder is None or not (folder / OUTCOMES_FILE).is_file():
        return None
    try:
        return Baked.load(folder / OUTCOMES_FILE)
    except BakedError as exc:
        _fail(str(exc))


def eval_adapters(version: str, *, logs: str | None, policy: Path | None, against: str | None,
                  adapters_dir: Path | None, json_out: Path | None) -> None:
    """The command (module docstring)."""
    from gateway.commands import load_policy_or_exit
    from gateway.commands.adapters import _versions
    from gateway.commands.db import shown_url
    from gateway.commands.eval import _logged_rows
    from gateway.commands.output import check_output, write_output
    from router.eval.versions import LOGGED, Arm, compare
    from router.eval.whatif import Logged
    from router.learning.versions import VersionError

    check_output(json_out, "--json")
    if policy is None:
        from gateway.settings import Settings

        policy = Settings().policy_path
    if policy is None:
        _fail("--adapters-version needs --policy (the policy the gateways run; or MIXROUTE_POLICY_PATH)")
    loaded = load_policy_or_exit(policy, exit_code=2)
    versions = _versions(adapters_dir)
    against = against or LOGGED
    try:
        info = versions.info(version)
        if against != LOGGED:
            versions.info(against)
    except VersionError as exc:
        _fail(str(exc))
    start = datetime.fromisoformat(info.holdout_from) if info.holdout_from else None
    shown = shown_url(logs) if logs else "the store (MIXROUTE_DATABASE_URL)"
    try:
        raw = _logged_rows(logs, start, None, datetime.now(timezone.utc))
        rows = [Logged.from_row(r) for r in raw]
        times = [_time(r.get("created_at")) for r in raw]
    except (OSError, ValueError) as exc:
        text = str(exc).replace(logs, shown) if logs else str(exc)
        _fail(f"{shown}: {text}")
    arms = [Arm(against, None if against == LOGGED else _baked(versions, against)),
            Arm(version, _baked(versions, version))]
    result = compare(loaded, rows, times, arms)
    if start is None:
        result.notes.append(f"note: version {version} held nothing out (trained with --holdout 0): these are the "
                            "rows it was trained on, so its figures are optimistic.")
    if versions.heads(version)[0] != versions.heads(against if against != LOGGED else "shipped")[0]:
        result.notes.append(f"note: version {version} has its own classifier heads; prompts are not stored, so only "
                            "its outcome correction is compared here (its heads: `mixroute eval --test DATA "
                            "--adapters DIR/heads`).")
    held = f"held out from {info.holdout_from}" if start else "all rows"
    typer.echo(f"{version} vs {against} on {len(rows)} logged request(s) ({held}); policy {policy}")
    typer.echo(result.summary())
    if json_out is not None:
        doc = {"version": version, "against": against, "holdout_from": info.holdout_from, "policy_hash": loaded.hash,
               **vars(result), "generated_at": datetime.now(timezone.utc).isoformat()}
        text = json.dumps(doc, indent=1, default=str) + "\n"
        write_output(json_out, "--json", lambda p: p.write_text(text, encoding="utf-8"))


def _time(value) -> datetime:
    t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
