"""The ``mixroute`` command line. Each command imports what it needs inside its body so
``mixroute --help`` stays fast (no torch, litellm or FastAPI at import)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(name="mixroute", help="mixroute: a model-routing, OpenAI-compatible LLM gateway.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
policy_app = typer.Typer(help="Validate and inspect routing policies.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"mixroute {version('mixroute')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            typer.echo("mixroute (not installed: version unknown)")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the installed version and exit.")] = False,
) -> None:
    """mixroute: a model-routing, OpenAI-compatible LLM gateway."""


@app.command()
def serve(
    policy: Annotated[Optional[Path], typer.Option(help="Routing policy YAML (default: the bundled demo policy).")] = None,
    host: Annotated[Optional[str], typer.Option(help="Bind address (default 127.0.0.1 or MIXROUTE_HOST).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (default 8000 or MIXROUTE_PORT).")] = None,
    database_url: Annotated[Optional[str], typer.Option(help="Store URL (default sqlite:///mixroute.db).")] = None,
) -> None:
    """Start the gateway (OpenAI-compatible API under /v1)."""
    from gateway.serve import run

    run(policy=policy, host=host, port=port, database_url=database_url)


@policy_app.command("validate")
def policy_validate(file: Annotated[Path, typer.Argument(help="Policy YAML file.")]) -> None:
    """Validate FILE; print `FILE:LINE path: problem` per problem and exit 1 on error."""
    from gateway.commands import load_policy_or_exit
    from router.classify.labels import quality_notes, shipped_quality_labels
    from router.policy.loader import PolicyError, check_replay_data
    from router.policy.models import pricing_notes

    loaded = load_policy_or_exit(file, exit_code=1)
    try:
        check_replay_data(loaded)
    except PolicyError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    p = loaded.policy
    typer.echo(f"{file}: ok (hash {loaded.hash}, {len(p.backends)} backends, {len(p.routes)} routes)")
    for note in pricing_notes(p) + quality_notes(p, shipped_quality_labels()):
        typer.echo(f"{file}: note: {note}", err=True)


# --- commands registered by other modules (one line each) ---------------------------
from gateway.commands import db as _db  # noqa: E402
app.add_typer(_db.app, name="db")
from gateway.commands.replay import replay as _replay  # noqa: E402
app.command("replay")(_replay)
from gateway.commands import keys as _keys  # noqa: E402
app.add_typer(_keys.app, name="keys")
from gateway.commands import tenants as _tenants  # noqa: E402
app.add_typer(_tenants.app, name="tenants")


from gateway.commands.train import train as _train  # noqa: E402
app.command("train")(_train)
from gateway.commands import bench as _bench  # noqa: E402
app.add_typer(_bench.app, name="bench")
from gateway.commands import logs as _logs  # noqa: E402
app.add_typer(_logs.app, name="logs")
from gateway.commands.eval import eval_cmd as _eval  # noqa: E402
app.command("eval")(_eval)
from gateway.commands.eval import whatif_cmd as _whatif  # noqa: E402
policy_app.command("what-if")(_whatif)
from gateway.commands.calibrate import calibrate as _calibrate  # noqa: E402
app.command("calibrate")(_calibrate)
from gateway.commands import adapters as _adapters  # noqa: E402
app.add_typer(_adapters.app, name="adapters")


def main() -> None:
    import sys

    # Bytes that are not UTF-8 reach Python as lone surrogates, which no store, log or
    # terminal can write: refuse them here, once for every command, instead of deep inside one.
    for i, arg in enumerate(sys.argv[1:], 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            print(f"error: argument {i} ({ascii(arg)[:60]}) is not valid UTF-8 text", file=sys.stderr)
            raise SystemExit(2) from None
    app()


if __name__ == "__main__":
    main()
