"""``mixroute eval``: offline cost-quality evaluation of routers on outcome data.

Every ``--test`` PATH (a file, or a folder = one dataset of all its files, any format of
:mod:`backends.data`) is evaluated with each ``--router`` (default: all): the router's
curve over its threshold, its NDCH, AIQ (cost-range and max-cost normalisations), and on
two-model data APGR, CPT(50%) and CPT(80%), with 95% bootstrap intervals
(:mod:`router.eval`). With ``--train``, learned routers, ``mixroute``'s heads included
(:mod:`router.eval.heads`), are fit on those rows first. A ``rich`` table goes to the terminal; ``--json``, ``--report`` and
``--plot`` write the results.

A router named twice with ``--router`` runs once (a note says so). A ``--prices`` entry
that prices nothing (no model of the data has that name, or the data records that model's
costs) gets a warning line on stderr naming the models it may have meant, as does a model
named more than once in ``--prices`` (its last price is used). A ``--test`` (or
``--train``) path given twice, also through a link or another spelling of the path, is
refused: it would be evaluated (its rows counted) twice.

Exit status: 0; 2 for bad input (the message names the file and the problem), an empty
path (``--test ''``: typer would read it as the current folder), a path given twice, an
output (``--json``, ``--report``, ``--plot``) that is one of the input files, or an
unknown router; 1 when a router named with ``--router`` could not run (its row says why),
or, without ``--router``, when none could.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gateway.commands import require_modules
from gateway.commands.output import (check_not_input, check_not_repeated, check_output, data_inputs, folder_inputs,
                                     path_of, paths_of, write_output)

#: What an empty ``--test``/``--train`` is refused for (:func:`paths_of`).
_DATA = "an outcome data file or folder (. for the current folder)"


def eval_cmd(
    # The input paths are read as text, not Path: Path("") is ".", so an empty --test (--train,
    # --exclude, --adapters, --prices) would read the current folder; paths_of refuses it.
    test: Annotated[Optional[list[str]], typer.Option("--test", metavar="<list[Path]>",
                                                      help="Outcome data file or folder (one dataset each); "
                                                      "repeatable.")] = None,
    train: Annotated[Optional[list[str]], typer.Option("--train", metavar="<list[Path]>",
                                                       help="Rows to fit learned routers on, mixroute's "
                                                       "quality/output-length heads included; repeatable. Without: "
                                                       "knn/mlp/mf cross-fit on the test rows (5 folds), mixroute "
                                                       "uses the shipped heads.")] = None,
    router: Annotated[Optional[list[str]], typer.Option("--router", help="Router name; repeatable (default: all).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result rows as JSON.")] = None,
    plot_out: Annotated[Optional[Path], typer.Option("--plot", help="Draw the cost-quality curves (PNG).")] = None,
    report_out: Annotated[Optional[Path], typer.Option("--report", help="Write a Markdown report.")] = None,
    exclude: Annotated[Optional[list[str]], typer.Option("--exclude", metavar="<list[Path]>",
                                                         help="JSON lines of prompts to drop "
                                                         "(eval_prompt or prompt keys); repeatable.")] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for 95% intervals (0: none).")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of random routers, folds and resampling.")] = 0,
    holdout: Annotated[bool, typer.Option("--holdout", help="Keep only rows in the classifier's held-out split "
                                          "(fair for the shipped heads on the shared data).")] = False,
    adapters: Annotated[Optional[str], typer.Option(metavar="<path>", help="Heads folder for the mixroute router "
                                                    "without --train (default: the shipped adapters/).")] = None,
    embedder: Annotated[str, typer.Option(help="Embeddings of knn/mlp/mf: minilm (cached) or hashing.")] = "minilm",
    prices: Annotated[Optional[str], typer.Option(metavar="<path>", help="YAML/JSON model -> USD per 1M tokens, "
                                                  "for data that records no cost (default: the replay price "
                                                  "list).")] = None,
    adapters_version: Annotated[Optional[str], typer.Option(help="Instead of --test: compare this adapter version "
                                                            "with the live one on its held-out logs, off-policy "
                                                            "(docs/LEARNING.md).")] = None,
    against: Annotated[Optional[str], typer.Option(help="With --adapters-version: the version to compare with "
                                                   "(default: the logged decisions).")] = None,
    logs: Annotated[Optional[str], typer.Option(help="With --adapters-version: store URL or export file (default: "
                                                "the configured store).")] = None,
    policy: Annotated[Optional[Path], typer.Option(help="With --adapters-version: the policy the gateways run.")] = None,
    adapters_dir: Annotated[Optional[Path], typer.Option(help="With --adapters-version: the versions folder.")] = None,
) -> None:
    """Compare routers on outcome data: cost-quality curves, AIQ, APGR, CPT."""
    require_modules("mixroute eval", "eval", "numpy")
    if adapters_version is not None:
        from gateway.commands.eval_adapters import eval_adapters

        return eval_adapters(adapters_version, logs=logs, policy=policy, against=against, adapters_dir=adapters_dir,
                             json_out=json_out)
    if not test:
        typer.echo("error: --test is required (or --adapters-version to compare adapter versions on logs)", err=True)
        raise typer.Exit(2)
    from rich.console import Console

    from router.eval import report
    from router.eval import routers as registry
    from router.eval.data import read_exclude
    from router.eval.prices import read_prices
    from router.eval.errors import EvalDataError
    from router.eval.runner import EvalConfig, evaluate

    test = paths_of(test, "--test", _DATA)
    train = paths_of(train, "--train", _DATA)
    exclude = paths_of(exclude, "--exclude", "a JSON lines file of prompts to drop")
    adapters = path_of(adapters, "--adapters", "a heads folder (. for the current folder), or leave --adapters out "
                                               "for the shipped heads")
    prices = path_of(prices, "--prices", "a YAML or JSON price file, or leave --prices out for the replay price list")
    err = Console(stderr=True, soft_wrap=True)
    outputs = ((json_out, "--json"), (report_out, "--report"), (plot_out, "--plot"))
    for path, flag in outputs:
        check_output(path, flag)
    check_not_input(outputs, [*data_inputs(test, "--test"), *data_inputs(train, "--train"),
                              *((p, "--exclude") for p in exclude),
                              *([(prices, "--prices")] if prices else []), *folder_inputs(adapters, "--adapters")])
    check_not_repeated(test, "--test", "it would be evaluated twice")
    check_not_repeated(train, "--train", "its rows would count twice")
    if plot_out is not None and plot_out.suffix.lower() not in PLOT_SUFFIXES:
        # Checked before the evaluation: matplotlib refused the format only after it had run.
        typer.echo(f"error: --plot {plot_out}: name a {', '.join(PLOT_SUFFIXES)} file", err=True)
        raise typer.Exit(2)
    if bootstrap < 0:
        err.print(f"[red]error:[/] --bootstrap must be 0 (none) or more, not {bootstrap}")
        raise typer.Exit(2)
    repeated = [n for n in dict.fromkeys(router or []) if (router or []).count(n) > 1]
    if repeated:
        err.print(f"note: router {', '.join(repeated)} given more than once: run once", markup=False, highlight=False)
        router = list(dict.fromkeys(router))
    names = router or registry.names()
    unknown = [n for n in names if n not in registry.names()]
    if unknown:
        err.print(f"[red]error:[/] unknown router {unknown[0]!r} (known: {', '.join(registry.names())})")
        raise typer.Exit(2)
    if embedder not in ("minilm", "hashing"):
        err.print(f"[red]error:[/] --embedder must be minilm or hashing, not {embedder!r}")
        raise typer.Exit(2)

    def warn(line: str) -> None:
        err.print(f"warning: --prices {prices}: {line}", style="yellow", markup=False, highlight=False)

    try:
        excluded = set().union(*(read_exclude(p) for p in exclude))
        config = EvalConfig(routers=names, exclude=excluded, bootstrap=bootstrap, seed=seed, holdout=holdout,
                            options={"adapters": adapters}, prices_per_1m=read_prices(prices, warn) if prices else {},
                            warn=warn)
        with _Progress(err) as progress:
            if embedder == "hashing":
                from router.eval.embed import make_embedder

                emb = make_embedder("hashing")
                config.embed = lambda texts: emb(texts)
            reports = evaluate(test, train, config, progress)
    except EvalDataError as exc:
        err.print(f"error: {exc}", style="red", markup=False, highlight=False)
        raise typer.Exit(2)
    _table(reports)
    args = sys.argv[sys.argv.index("eval") + 1:] if "eval" in sys.argv else []
    command = "mixroute eval " + " ".join(shlex.quote(a) for a in args)
    if json_out:
        write_output(json_out, "--json", lambda p: report.write_json(reports, p))
    if report_out:
        write_output(report_out, "--report", lambda p: report.write_markdown(reports, p, command))
    if plot_out:
        try:
            write_output(plot_out, "--plot", lambda p: report.plot(reports, p))
        except ImportError:
            err.print("matplotlib is not installed (pip install 'mixroute[eval]'): no plot written", style="yellow")
    results = [r for rep in reports for r in rep.results]
    not_run = {r.router: r.note for r in results if all(v is None for v in r.values.values())}
    if router:  # a router asked for by name must run
        failed = [n for n in router if n in not_run]
    else:  # all of them: fail only when none ran
        failed = list(not_run) if set(not_run) >= {r.router for r in results} else []
    if failed:
        err.print(f"error: could not run {', '.join(failed)}: {not_run[failed[0]]}", style="red", markup=False,
                  highlight=False)
        raise typer.Exit(1)


class _Progress:
    """A rich progress display fed by ``(label, done, total)`` callbacks (one bar per label)."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        self.bars.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bars.__exit__(*exc)

    def __call__(self, label: str, done: int, total: int) -> None:
        key = label.split(":")[0] if ":" in label else label
        if key not in self.tasks:
            self.tasks[key] = self.bars.add_task(label, total=total)
        self.bars.update(self.tasks[key], description=label, completed=done, total=total)


#: Image formats ``--plot`` writes (matplotlib picks the format from the suffix).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _table(reports) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from router.eval.report import COLUMNS, describe, fmt

    # Piped output gets a fixed width so that no column is cut to "…".
    console = Console() if sys.stdout.isatty() else Console(width=150)
    for rep in reports:
        t = Table(title=f"{rep.data.name}", caption=describe(rep), caption_justify="left")
        t.add_column("router", no_wrap=True)
        for c in COLUMNS:
            t.add_column(c, justify="right", no_wrap=True)
        t.add_column("fit / note")
        for r in rep.results:
            # Text, not markup: a note's "pip install 'mixroute[classifier]'" lost its [classifier].
            t.add_row(Text(r.router), *(fmt(c, r.values.get(c)) for c in COLUMNS), Text(r.note or r.fit))
        console.print(t)


def whatif_cmd(
    new_policy: Annotated[Path, typer.Argument(help="The policy YAML to try.")],
    logs: Annotated[Optional[str], typer.Option("--logs", help="Store URL, a SQLite store file, or a `mixroute "
                                                "logs export` file (.jsonl, .csv, .parquet); default: the "
                                                "configured store.")] = None,
    since: Annotated[Optional[str], typer.Option(help="First decision time (ISO 8601, `now`, or an age like 7d; "
                                                 "default: the beginning).")] = None,
    until: Annotated[Optional[str], typer.Option(help="Decision time excluded from here on (default: now).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the estimate as JSON.")] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for 95% intervals (0: none, the interval "
                                           "is the point estimate).")] = 200,
) -> None:
    """Re-decide logged requests under NEW_POLICY; estimate cost and quality changes.

    The store is only read: a SQLite file is opened read-only. Figures that have no data
    (no request re-decided) are ``null`` in --json. Refused with exit status 2 before any
    work: a --json that is NEW_POLICY or the logs' own file, and an empty --since/--until
    window (the same times and defaults as ``logs export``, read against one ``now``).
    """
    require_modules("mixroute policy what-if", "eval", "numpy")
    import json
    from datetime import datetime, timezone

    from gateway.commands import load_policy_or_exit
    from gateway.commands.db import shown_url
    from gateway.commands.logs import EPOCH, check_window, time_option
    from router.eval.whatif import Logged, what_if

    loaded = load_policy_or_exit(new_policy, exit_code=2)
    check_output(json_out, "--json")
    check_not_input([(json_out, "--json")], [(new_policy, "NEW_POLICY"), *_logs_files(logs)])
    if bootstrap < 0:
        raise typer.BadParameter(f"--bootstrap must be 0 (none) or more, not {bootstrap}")
    now = datetime.now(timezone.utc)
    start, end = time_option(since, "--since", now), time_option(until, "--until", now)
    if start is not None or end is not None:  # as `logs export`: a window that holds no time is a typo
        check_window(start or EPOCH, end or now, since, until)
    shown = shown_url(logs) if logs else "the store (MIXROUTE_DATABASE_URL)"
    try:
        raw = _logged_rows(logs, start, end, now)
        rows = [Logged.from_row(r) for r in raw]
    except (OSError, ValueError) as exc:
        text = str(exc).replace(logs, shown) if logs else str(exc)  # a URL in the reason: password masked too
        typer.echo(f"error: {shown}: {text}", err=True)
        raise typer.Exit(2)
    result = what_if(loaded, rows, bootstrap=bootstrap)
    typer.echo(f"{len(rows)} logged request(s); policy {new_policy} (hash {loaded.hash})")
    typer.echo(result.summary())
    if json_out:
        doc = {**vars(result), "moves": [{"from": a, "to": b, "n": k} for (a, b), k in result.moves.items()],
               "summary": result.summary(), "policy_hash": loaded.hash,
               "generated_at": datetime.now(timezone.utc).isoformat()}
        text = json.dumps(doc, indent=1, default=str) + "\n"
        write_output(json_out, "--json", lambda p: p.write_text(text, encoding="utf-8"))


def _logs_files(logs: Optional[str]) -> list[tuple[Path, str]]:
    """``(file, label)`` of the files ``--logs`` names, for :func:`check_not_input`: an
    export or SQLite file (with a SQLite file's ``-wal``/``-shm``/``-journal`` files), or a
    SQLite store's files; none for another database."""
    from gateway.commands.db import _url
    from gateway.commands.open_store import sqlite_files, store_files

    if logs and "://" not in logs:
        return sqlite_files(Path(logs), "--logs")
    try:
        url = _url(logs)
    except ValueError:  # settings that do not validate: reading the logs says so
        return []
    return store_files(url, "--logs" if logs else "the store")


def _logged_rows(logs: Optional[str], start, end, now) -> list[dict]:
    """Export rows from a file, or from the store (``iter_rows``) filtered by decision time.

    ``logs`` is an export file, a SQLite store file (by its header: read as the store), a
    database URL, or ``None`` (the configured store). The store is opened read-only and read
    over ``[start or 1970, end or now)``; a file's rows are filtered only by the bounds given.

    Raises:
        OSError, ValueError: ``logs`` cannot be read (the message says why, in one line),
            e.g. a file named ``.db``, ``.sqlite`` or ``.sqlite3`` that is not SQLite.
    """
    import csv
    import json
    import os

    from gateway.commands.open_store import looks_like_sqlite, named_like_sqlite
    from gateway.store.db import SQLITE_HEADER

    path = Path(logs) if logs else None
    if path is not None and path.is_file() and not looks_like_sqlite(path):
        if named_like_sqlite(path) and os.access(path, os.R_OK):  # not read as JSON lines: it says "line 1"
            raise ValueError(f"is named like a SQLite database but is not one (it does not start with "
                             f"{SQLITE_HEADER[:15].decode()!r}); give a mixroute store, or an export file (.jsonl, "
                             ".csv, .parquet)")
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        elif path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        else:
            rows = []
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError as exc:
                        raise ValueError(f"line {i}: {exc}") from None
                    if not isinstance(row, dict):
                        raise ValueError(f"line {i}: not a JSON object (one request per line, as "
                                         "`mixroute logs export` writes)")
                    rows.append(row)
        return [r for r in rows if _in_window(r.get("created_at"), start, end)]
    if path is not None and path.is_dir():
        raise OSError("is a folder; give an export file (`mixroute logs export`) or a database URL")
    if path is not None and path.is_file():  # a SQLite store given by its path, not its URL
        from sqlalchemy.engine import URL

        return _store_rows(URL.create("sqlite", database=str(path.resolve())), start, end, now)
    if path is not None and "://" not in str(logs):
        raise OSError("no such export file, and not a database URL")
    from gateway.commands.db import _url

    return _store_rows(_url(logs), start, end, now)


def _store_rows(url, start, end, now) -> list[dict]:
    """The export rows of the store at ``url`` (opened read-only) decided in
    ``[start or 1970, end or now)``.

    Raises:
        OSError, ValueError: not a database URL, not a usable store, or the query failed.
    """
    import sqlalchemy as sa

    from gateway.commands.logs import EPOCH
    from gateway.commands.open_store import StoreUnusable, open_store
    from gateway.store.db import BadUrl, normalize_url
    from gateway.store.export import iter_rows

    try:
        normalize_url(url)
    except BadUrl as exc:
        raise ValueError(f"bad URL: {exc}") from None
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"not a database URL ({exc})") from None
    try:
        engine = open_store(url, read_only=True)
    except BadUrl as exc:  # a query value the driver cannot take
        raise ValueError(f"bad URL: {exc}") from None
    except StoreUnusable as exc:
        raise ValueError(str(exc)) from None
    except (sa.exc.SQLAlchemyError, ImportError) as exc:
        raise OSError(_cannot_read(exc)) from None
    try:
        return [r for chunk in iter_rows(engine, start or EPOCH, end or now) for r in chunk]
    except sa.exc.SQLAlchemyError as exc:
        raise OSError(_cannot_read(exc)) from None
    finally:
        engine.dispose()


def _cannot_read(exc: Exception) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"cannot read the store ({type(exc).__name__}: {first})"


def _in_window(created: object, start, end) -> bool:
    from datetime import datetime, timezone

    if created in (None, "") or (start is None and end is None):
        return True
    t = created if isinstance(created, datetime) else datetime.fromisoformat(str(created))
    t = t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return (start is None or t >= start) and (end is None or t < end)
