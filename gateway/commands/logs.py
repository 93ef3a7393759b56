"""``mixroute logs``: export and prune the decision/outcome/feedback store.

Times (``--since``, ``--until``): an ISO 8601 date or date-time (UTC when no offset is
given), ``now``, or an age such as ``7d`` (that long before now). Ages (``--older-than``):
a number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w``: ``90d``, ``12h``, ``2w``.

Both commands refuse (exit 2, one line) a SQLite file that does not exist (it is not
created) or is not SQLite, and a database that was never migrated, is not a mixroute store or
is at an older revision, pointing at ``mixroute db upgrade``, rather than failing on a
missing table. ``export`` only reads: it opens a SQLite file read-only, so the file is left
as it was (:mod:`gateway.commands.open_store`). An empty window (``--since`` not before
``--until``) is refused with exit status 2, as ``policy what-if`` does; every time option of
one command is read against the same ``now``, so ``--since 1d --until 1d`` or ``--since 0d``
is such a window. ``export`` refuses an OUT that is the store's own file (exit 2).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from gateway.commands.db import DatabaseUrl, _url, fail, shown_url
from gateway.commands.output import check_not_input, check_output, is_stdout

app = typer.Typer(help="Export and prune the request logs (decisions, outcomes, feedback).", no_args_is_help=True)

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_CONFIRM_UNDER = timedelta(days=1)  # a prune reaching into the last day needs --yes
#: ``logs export``'s format named by OUT's suffix (without ``--format``; a different
#: ``--format`` is refused). Other suffixes are JSON lines unless ``--format`` says otherwise.
SUFFIX_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
#: The default ``--since`` of ``logs export`` and ``policy what-if``: the beginning.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_age(text: str) -> timedelta:
    """``90d`` -> 90 days.

    Raises:
        ValueError: not a number followed by one of ``s m h d w``.
    """
    m = _AGE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an age like 90d, 12h, 30m, 2w")
    try:
        return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    except OverflowError:
        raise ValueError(f"{text!r} is longer than any date can go back") from None


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ``now``, an age (``7d`` ago) or ISO 8601.

    Raises:
        ValueError: none of those.
    """
    now = now or datetime.now(timezone.utc)
    if text.strip().lower() == "now":
        return now
    outside = f"{text!r} is outside the dates this can handle (years 1-9999, UTC)"
    if _AGE.match(text):
        age = parse_age(text)
        try:
            return now - age
        except OverflowError:
            raise ValueError(outside) from None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use ISO 8601 (2026-11-01, 2026-11-01T12:00Z), "
                         "'now' or an age like 7d") from None
    try:
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(outside) from None


def time_option(value: Optional[str], flag: str, now: datetime) -> Optional[datetime]:
    """The option ``flag``'s time (:func:`parse_time` against ``now``: one ``now`` for all
    the time options of a command, so that equal expressions give equal times); ``None``
    when not given.

    Raises:
        typer.BadParameter: not a time; the message names ``flag``.
    """
    if value is None:
        return None
    try:
        return parse_time(value, now)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{flag}'") from None


def _age_option(value: str) -> timedelta:
    try:
        return parse_age(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--older-than'") from None


def _error(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _engine(url: str, *, read_only: bool):
    """An engine on a store that is migrated to the head revision (a SQLite file opened
    read-only with ``read_only``: see :mod:`gateway.commands.open_store`).

    Raises:
        typer.Exit: 2 when the SQLite file does not exist or is not SQLite, or the database
            was never migrated, is not a mixroute store or is at an older revision (the
            message says what to do, e.g. run ``mixroute db upgrade``); 1/2 for a bad URL or
            an unreachable database (see :func:`gateway.commands.db.fail`).
    """
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.commands.open_store import StoreUnusable, open_store

    try:
        return open_store(url, read_only=read_only)
    except StoreUnusable as exc:
        _error(f"{shown_url(url)}: {exc}", 2)
    except (SQLAlchemyError, ImportError) as err:
        fail(url, err)


def check_window(start: datetime, end: datetime, since: Optional[str], until: Optional[str]) -> None:
    """Exit 2 with one line when ``[start, end)`` holds no time (``--since`` not before
    ``--until``); ``since`` and ``until`` are the options as given (``None``: the default).

    Raises:
        typer.Exit: the window is empty.
    """
    if start >= end:
        _error(f"--until must be after --since (--since {since or 'default'} is {start.isoformat()}, --until "
               f"{until or 'now'} is {end.isoformat()}): the window would be empty", 2)


@app.command()
def export(
    out: Annotated[Path, typer.Argument(help="Output file; - writes to standard output.")],
    since: Annotated[Optional[str], typer.Option(help="First decision time included (default: the beginning).",
                                                 show_default=False)] = None,
    until: Annotated[Optional[str], typer.Option(help="Decision time excluded from here on (default: now).",
                                                 show_default=False)] = None,
    format: Annotated[Optional[str], typer.Option("--format", "-f", help="parquet, csv or jsonl (default: from "
                                                  "OUT's suffix, .parquet or .csv; else jsonl).",
                                                  show_default=False)] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Write one row per request (decision + outcome + aggregated feedback) to OUT."""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.commands.open_store import store_files
    from gateway.store.export import FORMATS, export as run_export

    named = SUFFIX_FORMATS.get(Path(str(out)).suffix.lower()) if not is_stdout(out) else None
    if format is None:
        format = named or "jsonl"
    if format not in FORMATS:
        raise typer.BadParameter(f"unknown format {format!r} (known: {', '.join(FORMATS)})", param_hint="--format")
    if named is not None and named != format:  # e.g. JSON lines in a file named .parquet: unreadable as parquet
        _error(f"--format {format}, but OUT {out} is named for {named}: give -f {named} or another file name", 2)
    now = datetime.now(timezone.utc)
    start = time_option(since, "--since", now) or EPOCH
    end = time_option(until, "--until", now) or now
    check_window(start, end, since, until)
    to_stdout = is_stdout(out)
    if not to_stdout:
        check_output(out, "OUT")
    url = _url(database_url)
    store = "--database-url" if database_url else "the store"
    check_not_input([(out, "OUT")], store_files(url, store))
    engine = _engine(url, read_only=True)
    # Standard output gets the finished file, copied once it is complete, so a failed
    # export never leaves half a file in a pipe.
    with tempfile.TemporaryDirectory(prefix="mixroute-export-") if to_stdout else nullcontext() as tmp:
        target = Path(tmp) / f"export.{format}" if to_stdout else out
        try:
            n = run_export(engine, start, end, format, target)  # type: ignore[arg-type]
        except SQLAlchemyError as err:
            fail(url, err)
        except OSError as err:
            _error(f"OUT {out}: cannot write: {err.strerror or err}", 2)
        except RuntimeError as err:  # parquet without pyarrow
            typer.echo(str(err), err=True)
            raise typer.Exit(1)
        finally:
            engine.dispose()
        if to_stdout:
            stream = typer.get_binary_stream("stdout")
            with target.open("rb") as fh:
                shutil.copyfileobj(fh, stream)
            stream.flush()
    summary = f"{'standard output' if to_stdout else out}: {n} request(s) decided in [{start.isoformat()}, {end.isoformat()})"
    typer.echo(summary, err=to_stdout)


@app.command()
def prune(
    older_than: Annotated[str, typer.Option("--older-than", help="Age, e.g. 90d.")] = "90d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count, delete nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Confirm an --older-than under 1d.")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete requests (decision, outcome, feedback) decided more than --older-than ago.

    An --older-than under one day (``0d``, ``12h``) deletes recent traffic, possibly all of
    it, and needs --yes (or --dry-run to count first).
    """
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.store.retention import count_older, prune as run_prune

    age = _age_option(older_than)
    try:
        cutoff = datetime.now(timezone.utc) - age
    except OverflowError:  # reported like parse_age's own "longer than any date" (a bad option value)
        raise typer.BadParameter(f"{older_than.strip()!r} is outside the dates this can handle (years 1-9999, "
                                 "UTC)", param_hint="'--older-than'") from None
    if age < _CONFIRM_UNDER and not (dry_run or yes):
        _error(f"--older-than {older_than.strip()} deletes requests of the last day too (everything decided "
               f"before {cutoff.isoformat(timespec='seconds')}); pass --yes to confirm, or --dry-run to count", 2)
    url = _url(database_url)
    engine = _engine(url, read_only=False)
    try:
        counts = count_older(engine, cutoff) if dry_run else run_prune(engine, cutoff)
    except SQLAlchemyError as err:
        fail(url, err)
    finally:
        engine.dispose()
    verb = "would delete" if dry_run else "deleted"
    typer.echo(f"{verb} {counts.decisions} decision(s), {counts.outcomes} outcome(s), "
               f"{counts.feedback} feedback row(s), {counts.observations} observation(s) older than {cutoff.isoformat()}")
