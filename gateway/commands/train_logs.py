"""``mixroute train --from-logs URL|FILE``: a new adapter version from own logs and feedback.

Reads the observations of a store (URL or SQLite file, opened read-only) or of a
``mixroute logs export`` file, holds out the newest ``--holdout`` share for ``mixroute
eval --adapters-version``, bakes the rest into the version's outcome correction
(:mod:`router.learning.from_logs`), and writes the version into the versions folder, its
heads the active version's, or trained on research data when ``--data`` is given. The
version is not promoted: ``mixroute adapters promote`` does that.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import typer


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def read_observations(logs: str, retry_window_s: float) -> list:
    """The observations of ``logs`` (:class:`router.learning.from_logs.LogObservation`).

    Raises:
        OSError, ValueError: ``logs`` cannot be read, in one line.
    """
    from gateway.commands.eval import _logged_rows
    from gateway.commands.open_store import looks_like_sqlite
    from router.learning.from_logs import LogObservation, from_export

    path = Path(logs)
    if "://" not in logs and path.is_file() and not looks_like_sqlite(path):
        return from_export(_logged_rows(logs, None, None, datetime.now(timezone.utc)))
    if "://" not in logs and not path.exists():
        raise OSError("no such export file, and not a database URL")
    if "://" not in logs and path.is_dir():
        raise OSError("is a folder; give an export file (`mixroute logs export`) or a database URL")
    import sqlalchemy as sa

    from gateway.commands.eval import _cannot_read
    from gateway.commands.open_store import StoreUnusable, open_store
    from gateway.store.db import BadUrl
    from gateway.store.observations import read_all

    url = logs if "://" in logs else sa.engine.URL.create("sqlite", database=str(path.resolve()))
    try:
        engine = open_store(url, read_only=True)
    except (BadUrl, StoreUnusable, sa.exc.ArgumentError) as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    except (sa.exc.SQLAlchemyError, ImportError) as exc:
        raise OSError(_cannot_read(exc)) from None
    try:
        rows = read_all(engine, retry_window_s)
    except sa.exc.SQLAlchemyError as exc:
        raise OSError(_cannot_read(exc)) from None
    finally:
        engine.dispose()
    return [LogObservation(r["request_id"], r["backend"], float(r["score"]), r["predicted"], r["probability"],
                           r["source"], r["created_at"], r["domain"]) for r in rows]


def train_from_logs(logs: str, *, version: str | None, holdout: float, policy: Path | None,
                    adapters_dir: Path | None, research: Callable[[Path], None] | None) -> None:
    """The command (module docstring); ``research`` trains heads on research data into a
    folder that holds a copy of the parent's heads."""
    from gateway.commands.adapters import _versions
    from gateway.commands.db import shown_url
    from router.learning.baked import OUTCOMES_FILE
    from router.learning.from_logs import bake, split
    from router.learning.versions import HEADS_DIR, VersionError, VersionInfo, new_version_id
    from router.policy.learning_config import LearningConfig
    from router.predict import UNKNOWN_QUALITY

    if not 0.0 <= holdout < 1.0:
        _fail(f"--holdout must be in [0, 1), not {holdout}")
    config, priors = LearningConfig(), {}
    if policy is not None:
        from gateway.commands import load_policy_or_exit

        p = load_policy_or_exit(policy, exit_code=2).policy
        config = p.learning or config
        priors = {b.name: b.quality if b.quality is not None else UNKNOWN_QUALITY for b in p.backends}
    versions = _versions(adapters_dir)
    try:
        parent = versions.active().version
    except VersionError as exc:
        _fail(str(exc))
    shown = shown_url(logs) if "://" in logs else logs
    try:
        obs = read_observations(logs, config.retry_window_s)
    except (OSError, ValueError) as exc:
        _fail(f"{shown}: {str(exc).replace(logs, shown)}")
    if not obs:
        _fail(f"{shown}: no feedback or retries in the logs: nothing to learn from")
    train, held, holdout_from = split(obs, holdout)
    baked = bake(train, config, priors)
    if baked is None:
        _fail(f"{shown}: every one of the {len(obs)} observation(s) would be held out; lower --holdout")
    heads_of = parent if research is None else "research data"
    pairs = sum(len(o) for o in baked.offsets.values())
    notes = [f"outcome correction rebuilt from {len(train)} observation(s) of {len(baked.tallies)} backend(s)",
             "prompts are not stored, so the classifier heads cannot be retrained from logs: "
             + (f"heads are {parent}'s" if research is None else "heads trained on the research data given"),
             f"quality estimates corrected per domain for {pairs} (backend, domain) pair(s)" if pairs else
             "no domain signal in the logs (classifier off?): no per-domain correction"]
    info = VersionInfo(version=version or new_version_id(), created_at=datetime.now(timezone.utc).isoformat(),
                       parent=parent, source="logs", trained_until=baked.trained_until.isoformat(),
                       holdout_from=holdout_from.isoformat() if holdout_from else None, notes=notes,
                       counts={"observations": len(obs), "trained": len(train), "held_out": len(held),
                               "per_backend": {b: round(t.weight, 3) for b, t in sorted(baked.tallies.items())},
                               "logs": shown})

    def fill(folder: Path) -> None:
        baked.save(folder / OUTCOMES_FILE, config.half_life_hours)
        if research is not None:
            _, parent_heads = versions.heads(parent)
            if parent_heads is not None:
                shutil.copytree(parent_heads, folder / HEADS_DIR, ignore=shutil.ignore_patterns("__*"))
            research(folder / HEADS_DIR)

    try:
        folder = versions.create(info, fill)
    except VersionError as exc:
        _fail(str(exc))
    typer.echo(f"wrote adapter version {info.version} -> {folder}")
    typer.echo(f"  {len(train)} observation(s) up to {info.trained_until}; {len(held)} held out"
               + (f" from {info.holdout_from}" if held else "") + f"; heads: {heads_of}")
    typer.echo("  note: " + notes[1])
    typer.echo("  note: " + notes[2])
    typer.echo(f"  compare: mixroute eval --adapters-version {info.version} --logs {shown} --policy POLICY.yaml")
    typer.echo(f"  promote: mixroute adapters promote {info.version}")
