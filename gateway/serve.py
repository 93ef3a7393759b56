"""``mixroute serve``: run the gateway under uvicorn (uvloop and httptools when installed)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pydantic import ValidationError

from gateway.commands import load_policy_or_exit


_FLAGS = {"policy_path": "--policy", "host": "--host", "port": "--port", "database_url": "--database-url"}


def _load_replay_data_or_exit(loaded) -> None:
    """Load the data of every ``replay`` backend now (into the process-wide cache the
    backends read at start), so that data the backend cannot use is ``FILE:LINE`` lines and
    exit status 1 here instead of a traceback from the server's lifespan."""
    from router.policy.loader import PolicyError, check_replay_data

    try:
        check_replay_data(loaded)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(1) from None


def run(*, policy: Path | None, host: str | None, port: int | None, database_url: str | None) -> None:
    """Validate the policy, then serve until interrupted. Exits with status 1 and
    ``FILE:LINE path: problem`` lines when the policy is invalid."""
    import uvicorn

    from gateway.app import create_app
    from gateway.settings import Settings

    overrides = {k: v for k, v in {"policy_path": policy, "host": host, "port": port,
                                   "database_url": database_url}.items() if v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            flag = _FLAGS.get(field)
            print(f"mixroute: invalid setting MIXROUTE_{field.upper()}{f' (or {flag})' if flag else ''}: "
                  f"{err['msg']} (got {err.get('input')!r})", file=sys.stderr)
        raise SystemExit(2)
    _warn_near_miss_settings(os.environ, Settings.model_fields)
    _check_database_url_or_exit(settings.database_url)
    _check_journal_path_or_exit(settings)
    if settings.policy_path is not None:
        loaded = load_policy_or_exit(settings.policy_path, exit_code=1)
        _load_replay_data_or_exit(loaded)
    if settings.classifier == "on":  # fail here in one line, not in the server's lifespan
        try:
            from router.classify import check_loadable

            check_loadable(dtype=settings.classifier_dtype, linear=settings.classifier_linear)
        except Exception as exc:
            print(f"mixroute: MIXROUTE_CLASSIFIER=on but the classifier cannot load: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("watchfiles").setLevel(logging.WARNING)  # "1 change detected" per policy-folder event
    if settings.log_level.lower() != "debug":
        # httpx logs every upstream call at INFO ("HTTP Request: POST <replica URL> ..."): one
        # synchronous stderr write per request on the event loop, and one line per vLLM
        # replica per /metrics poll. Kept at debug, where those lines are wanted.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    configured = _auth_configured(settings)
    if not configured:
        if settings.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"mixroute: no API keys and no MIXROUTE_ADMIN_KEY: refusing to expose an open gateway on "
                  f"{settings.host}; binding 127.0.0.1 instead (create a key with `mixroute keys create`)",
                  file=sys.stderr)
            settings = settings.model_copy(update={"host": "127.0.0.1"})
        if configured is None:
            print("mixroute: the store cannot be read, so whether API keys exist is unknown: requests get 503 "
                  "auth_unavailable (and /readyz 503) until it answers", file=sys.stderr)
        else:
            print("mixroute: auth is OFF (no keys exist, no admin key): open to local clients only", file=sys.stderr)
    _check_port_free_or_exit(settings.host, settings.port)
    from gateway.commands.db import shown_url

    which = settings.policy_path or "the bundled demo policy (fake backends, no API keys)"
    print(f"mixroute: serving {which} on http://{settings.host}:{settings.port}/v1 "
          f"(store {shown_url(settings.database_url)})", file=sys.stderr)  # never the password: it ends up in pod logs
    uvicorn.run(create_app(settings), **server_options(settings))


def server_options(settings) -> dict:
    """The keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` for ``settings``.
    ``limit_concurrency`` is ``MIXROUTE_MAX_CONNECTIONS``: beyond it uvicorn answers 503
    itself and closes the connection; its warning per refused request is replaced by one
    rate-limited line (:func:`gateway.body_guard.quiet_uvicorn_limit_log`)."""
    from gateway.body_guard import quiet_uvicorn_limit_log

    quiet_uvicorn_limit_log(settings.max_connections)
    return {"host": settings.host, "port": settings.port, "log_level": settings.log_level, "access_log": False,
            "timeout_keep_alive": settings.keep_alive_s, "loop": settings.event_loop,
            "limit_concurrency": settings.max_connections}


#: ``MIXROUTE_*`` variables that are not settings but are read elsewhere (tests, the bench policies).
_OTHER_VARS = frozenset({"MIXROUTE_TEST_DATABASE_URL", "MIXROUTE_TEST_REDIS_URL", "MIXROUTE_UPSTREAM_URL"})


def _warn_near_miss_settings(environ, fields) -> None:
    """One line per ``MIXROUTE_*`` variable that is no setting but nearly spells one
    (``MIXROUTE_POLICY_PTH``): settings ignore unknown variables, so a typo would otherwise
    silently serve the defaults. Variables far from every setting (a policy's own
    ``${MIXROUTE_...}`` references) are left alone."""
    import difflib

    known = [name.upper() for name in fields]
    for var in sorted(environ):
        if not var.startswith("MIXROUTE_") or var in _OTHER_VARS:
            continue
        name = var.removeprefix("MIXROUTE_")
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            print(f"mixroute: {var} is not a setting and is ignored; did you mean MIXROUTE_{close[0]}?",
                  file=sys.stderr)


def _check_port_free_or_exit(host: str, port: int) -> None:
    """One line and exit 2 when ``host:port`` cannot be bound (in use, an address this machine
    does not have, a privileged port), instead of uvicorn's error and exit 3 after start-up."""
    import errno
    import socket

    try:
        with socket.create_server((host, port)):  # SO_REUSEADDR, as uvicorn binds
            pass
    except OSError as exc:
        why = ("is already in use (another server on it?); choose another with --port or MIXROUTE_PORT"
               if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc.strerror or exc}")
        print(f"mixroute: {host}:{port} {why}", file=sys.stderr)
        raise SystemExit(2) from None


def _check_database_url_or_exit(url: str) -> None:
    """One line and exit 2 for a store URL SQLAlchemy cannot parse or has no dialect for
    (exit 1 for a missing driver), as ``mixroute db`` reports them, for a port outside
    1-65535, for an in-memory SQLite store (it would lose every row at exit) and for a SQLite
    path that is a folder or a file of something else (the store could never open it: a
    folder journaled every row forever, another file failed start-up with a traceback);
    nothing is connected."""
    from gateway.commands.db import fail, shown_url
    from gateway.store.db import make_engine, normalize_url, sqlite_file_problem, sqlite_path

    try:
        engine = make_engine(url)
        engine.dispose()
    except Exception as exc:  # noqa: BLE001  # fail() re-raises what it does not know
        fail(url, exc)
    parsed = normalize_url(url)
    problem = None
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        problem = f"port {parsed.port} is not between 1 and 65535"
    elif parsed.get_backend_name() == "sqlite" and sqlite_path(parsed) is None:
        problem = "an in-memory SQLite store keeps no row past exit; give a file (sqlite:///mixroute.db)"
    elif parsed.get_backend_name() == "sqlite":
        problem = sqlite_file_problem(sqlite_path(parsed))
    if problem:
        print(f"mixroute: invalid setting MIXROUTE_DATABASE_URL (or --database-url) {shown_url(url)!r}: {problem}",
              file=sys.stderr)
        raise SystemExit(2)


def _check_journal_path_or_exit(settings) -> None:
    """One line and exit 2 when the store's spill journal could not be written (a directory,
    a file where its folder should be, a read-only folder) or another process holds it (a
    second replica given the same file): found at start, not when rows are already being
    lost or replayed twice."""
    from gateway.store.journal import journal_path_problem
    from gateway.store.journal_lock import journal_holder
    from gateway.store.rows import default_journal_path

    path = settings.store_journal_path or default_journal_path(settings.database_url, settings.port)
    problem = journal_path_problem(path)
    holder = None if problem else journal_holder(path)
    if holder:
        print(f"mixroute: the store journal {path} is in use by another mixroute process ({holder}); give each "
              "gateway its own MIXROUTE_STORE_JOURNAL_PATH (the default includes the port)", file=sys.stderr)
        raise SystemExit(2)
    if problem:
        what = ("MIXROUTE_STORE_JOURNAL_PATH" if settings.store_journal_path
                else "MIXROUTE_DATABASE_URL (or --database-url)")  # the journal goes next to the database
        print(f"mixroute: invalid setting {what}: {problem}", file=sys.stderr)
        raise SystemExit(2)


def _auth_configured(settings) -> bool | None:
    """Whether an admin key is set or any API key exists in the store; ``None`` when the
    store cannot be reached at all (then nobody knows, and the gateway fails closed)."""
    if settings.admin_key:
        return True
    from gateway.auth.keys import any_keys
    from gateway.store.db import make_engine

    engine = make_engine(settings.database_url)
    try:
        try:
            engine.connect().close()
        except Exception:  # unreachable (down, wrong host or password)
            return None
        return any_keys(engine)
    except Exception:  # no store yet, or no api_keys table: no keys
        return False
    finally:
        engine.dispose()
