"""``mixroute replay``: send real prompts from outcome data through a gateway and score
the routing with the recorded outcomes.

Without ``--gateway`` the command serves the data itself: it writes a policy with one
``replay`` backend per model of the data (:class:`backends.replay.plan.ReplayPlan`:
quality prior = the model's mean recorded score; ``pricing``: token prices fitted to its
recorded costs where they explain them, else ``per_request`` = its mean recorded cost per
call, or a per-call price from the attached price list when the data records no cost;
each answer bills the call's recorded cost) and an ``auto`` route with ``quality_bar: {route_target: 0.95}`` (95% of
the strongest over the route's requests, :mod:`router.aggregate`), starts
``python -m gateway.cli serve`` on a free loopback port with a throw-away SQLite store,
waits for ``GET /readyz`` == 200, and stops it at the end (also on error or Ctrl-C).

Each prompt (the data's rows, duplicates removed; by default the files are interleaved,
each file's rows spread evenly over the run in their order, :func:`interleave`; ``--order
data`` sends them file by file and ``--seed`` shuffles them instead; ``--n`` keeps the first
N; one at a time unless ``--concurrency``: the default replays deterministically) is sent
as ``POST /v1/chat/completions`` with ``model: auto`` and one user message. The answering
backend (``x-mixroute-backend``) is scored with the recorded outcome of its model on that
prompt (:mod:`backends.replay.score`), and the report is written as JSON::

    {"n", "quality", "cost_usd", "baseline": {"model", "quality", "cost_usd"},
     "quality_ratio", "cost_ratio",
     "backend_share": {model: fraction}, "errors", "gateway_cost_usd", ...,
     "predictor", "classifier": {"dtype", "linear", "heads", "memory": {"k", "task_smoothing", ...}},
     "run": {"policy", "quality_bar", "split", "order", ...},
     "requests": [{"row", "source", "backend", "model", "score", "cost_usd", "error"}]}

While the prompts are sent, standard error shows how far the run is: one line as each tenth
of them is answered (at most 10 lines, :class:`gateway.commands.replay_report.Progress`), e.g. ``replay: 441/2205 prompts
(20%), 0:18 elapsed, ~1:12 left``; standard output holds only the tables, or only the report
with ``--json -``.

Exit status: 0; 1 when any request failed (the report is still written); 2 for bad data or arguments
(an output that is one of the input files among them, an option out of its range, an empty
``--data``, ``--json`` with ``--write-policy``) or a gateway that does not start; each with one
``mixroute replay: ...`` line on standard error.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gateway.commands.output import check_not_input, check_output, data_inputs, emit, is_stdout
from gateway.commands.replay_gateway import ReplayFailed, check_route, gateway_predictor, local_gateway
from gateway.commands.replay_report import Progress, build_report, print_summary, report_bytes

if TYPE_CHECKING:
    import httpx

    from backends.data import OutcomeRow
    from backends.replay.plan import ReplayPlan
    from backends.replay.score import Answered

#: The classifier's prompt-hash splits (``--split``), and ``heldout``: ``calib`` and ``test``
#: together, every row outside the heads' training rows and the outcome memory.
SPLITS = ("train", "calib", "test", "heldout")
#: ``--order``: the data's files spread evenly over the run (:func:`interleave`), or file by file.
ORDERS = ("interleaved", "data")
_MEMBERS = {"heldout": ("calib", "test")}
#: Largest --n / --seed: the JSON report records them as 64-bit integers.
_INT64 = 2**63 - 1
#: Most --concurrency: requests in flight at once.
MAX_CONCURRENCY = 64


def replay(
    # Read as text, not Path: Path("") is ".", so an empty --data would read the current folder.
    data: Annotated[list[str], typer.Option("--data", metavar="<list[Path]>",
                                            help="Outcome data file or folder; repeat for more.")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the JSON report here (- for standard "
                                                                    "output; the tables then go to standard error). "
                                                                    "Required, unless --write-policy (which "
                                                                    "writes no report).")] = None,
    gateway: Annotated[Optional[str], typer.Option(help="Use this running gateway (base URL) instead of starting one.")] = None,
    # The ranges are checked in the body (_check_range), for a one-line error instead of typer's box.
    n: Annotated[Optional[int], typer.Option("--n", help=f"Send only the first N prompts (1 to {_INT64}).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Shuffle the prompts with this seed before taking N "
                                                     f"(instead of --order; -{_INT64} to {_INT64}).")] = None,
    order: Annotated[Optional[str], typer.Option(help=(
        "interleaved (default): the data's files spread evenly over the run, each file's rows in "
        "their order, as a gateway serving them all at once sees them; data: file by file, in the "
        "data's order."))] = None,
    route: Annotated[str, typer.Option(help="The `model` sent: the route to replay.")] = "auto",
    concurrency: Annotated[int, typer.Option(help=(
        f"Requests in flight, 1 to {MAX_CONCURRENCY}. 1 decides the rows in order, so the same command gives "
        "the same report; more is faster on a machine with cores to spare, but a route_target bar then "
        "sees the requests in the order they happen to arrive."))] = 1,
    startup_timeout: Annotated[float, typer.Option(help="Seconds to wait for the gateway's /readyz.")] = 180.0,
    api_key: Annotated[Optional[str], typer.Option(envvar="MIXROUTE_API_KEY",
                                                   help="Bearer key for --gateway (a local gateway needs none).")] = None,
    split: Annotated[Optional[str], typer.Option(help="Keep only rows of this split of the classifier's "
                                                 "(train, calib or test, by prompt hash; heldout: calib and "
                                                 "test together).")] = None,
    policy: Annotated[Optional[Path], typer.Option(help="Serve this policy instead of the generated one (e.g. one "
                                                   "written by --write-policy and calibrated by `mixroute "
                                                   "calibrate --write`).")] = None,
    write_policy: Annotated[Optional[Path], typer.Option("--write-policy", help="Write the generated policy "
                                                         "here (- for standard output) and exit, replaying "
                                                         "nothing (so not with --json).")] = None,
    feedback: Annotated[bool, typer.Option("--feedback", help="After each answer, send the answering model's "
                                           "recorded score to the gateway's /v1/feedback (source `replay`), so "
                                           "that a policy with a learning: block learns from it "
                                           "(docs/LEARNING.md).")] = False,
) -> None:
    """Replay recorded prompts through the router; score quality and cost from the data."""
    try:
        _check_range("--n", n, 1, _INT64)
        _check_range("--seed", seed, -_INT64, _INT64)
        _check_range("--concurrency", concurrency, 1, MAX_CONCURRENCY)
        if "" in data:
            raise ReplayFailed("--data '': an empty path; give an outcome data file or folder (. for the "
                               "current folder)")
        paths = [Path(d) for d in data]
        if write_policy is not None and json_out is not None:
            raise ReplayFailed("--write-policy writes the policy and exits without replaying, so --json has "
                               "nothing to write; give one of them")
        if gateway is None and not startup_timeout > 0:  # also NaN: no wait could ever end well
            raise ReplayFailed(f"--startup-timeout must be a positive number of seconds, got {startup_timeout}")
        if order is not None and order not in ORDERS:
            raise ReplayFailed(f"--order {order!r}: one of {', '.join(ORDERS)}")
        if order is not None and seed is not None:
            raise ReplayFailed("--seed shuffles the rows; give --order or --seed, not both")
        order = None if seed is not None else order or "interleaved"
        if json_out is None and write_policy is None:
            raise ReplayFailed("--json OUT is required: where to write the report (- for standard output)")
        written = (write_policy, "--write-policy") if write_policy is not None else (json_out, "--json")
        check_not_input([written], [*data_inputs(paths, "--data"), *([(policy, "--policy")] if policy else [])])
        plan, rows = prepare(paths, n=n, seed=seed, split=split, order=order or "data")
        if write_policy is not None:
            to_file = not is_stdout(write_policy)
            if to_file:
                check_output(write_policy, "--write-policy")
            emit(write_policy, "--write-policy", plan.policy_yaml().encode())
            if to_file:
                typer.echo(f"wrote {write_policy}")
            return
        to_stdout = is_stdout(json_out)
        if not to_stdout:
            check_output(json_out, "--json")
        with contextlib.ExitStack() as stack:
            stack.enter_context(_sigterm_as_interrupt())
            typer.echo(f"replay: {len(rows)} prompts to send to " + (gateway or "a local gateway (starting it)"),
                       err=True)
            url = gateway or stack.enter_context(local_gateway(plan, timeout_s=startup_timeout, policy=policy))
            predictor, classifier = gateway_predictor(url)
            bar = check_route(url, route, api_key if gateway else None)
            answered = asyncio.run(send_all(url, plan, rows, route=route, concurrency=concurrency,
                                            api_key=api_key if gateway else None, progress=Progress(len(rows)),
                                            feedback=feedback))
    except ReplayFailed as exc:
        typer.echo(f"mixroute replay: {exc}", err=True)
        raise typer.Exit(2)
    except KeyboardInterrupt:
        typer.echo("mixroute replay: interrupted", err=True)
        raise typer.Exit(130)
    report = build_report(plan, answered, route=route, gateway=gateway)
    report["predictor"] = predictor
    report["classifier"] = classifier  # precision, heads and outcome memory (k, task_smoothing...), from /readyz
    # How the report was produced, so that two reports can be compared.
    report["run"] = {"policy": str(policy) if policy else ("generated" if gateway is None else None),
                     "quality_bar": bar, "split": split, "order": order, "seed": seed, "n": n,
                     "concurrency": concurrency, "feedback": feedback}
    emit(json_out, "--json", report_bytes(report))
    print_summary(report, "standard output" if to_stdout else json_out, stderr=to_stdout)
    if report["errors"]:
        first = next(a.error for a in answered if a.error)
        typer.echo(f"mixroute replay: {report['errors']} request(s) failed; first: {first}", err=True)
        raise typer.Exit(1)


def _check_range(flag: str, value: int | None, low: int, high: int) -> None:
    """Raise :class:`ReplayFailed` (one line naming ``flag`` and its range) unless ``value``
    is ``None`` (not given) or ``low <= value <= high``."""
    if value is not None and not low <= value <= high:
        raise ReplayFailed(f"{flag} must be from {low} to {high}, got {value}")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while the gateway subprocess runs, so it is stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def prepare(paths: list[Path], *, n: int | None = None, seed: int | None = None,
            split: str | None = None, order: str = "data") -> tuple["ReplayPlan", list["OutcomeRow"]]:
    """Load the data, build the plan and pick the prompts to send (only those of the
    classifier's ``split`` when given: :func:`router.classify.data.split_of`), in the data's
    order (``order="data"``: file by file), :func:`interleave`-d (``"interleaved"``) or
    shuffled with ``seed`` (which then wins), the first ``n`` of them.

    Raises:
        ReplayFailed: a path is unreadable or of no known format, the data records one
            model only, the datasets have different model sets, an unknown split, or there
            is no row.
    """
    if split is not None and split not in SPLITS:
        raise ReplayFailed(f"--split {split!r}: one of {', '.join(SPLITS)}")
    from backends.data import DataFormatError, Dataset, load, normalise_prompt
    from backends.replay.plan import ReplayPlan

    try:
        datasets = [load(p) for p in paths]
    except DataFormatError as exc:
        raise ReplayFailed(str(exc)) from None
    models = datasets[0].models
    if len(models) < 2:  # as `mixroute eval`: a column that is not a model reads as one model
        raise ReplayFailed(f"{paths[0]}: single-model data (models: {', '.join(models) or 'none'}); routing "
                           "needs outcomes of at least two models")
    for p, ds in zip(paths[1:], datasets[1:]):
        if set(ds.models) != set(models):
            raise ReplayFailed(f"{p}: models {sorted(ds.models)} differ from {paths[0]}'s {sorted(models)}")
    combined = Dataset(name="+".join(ds.name for ds in datasets), format=datasets[0].format, models=list(models),
                       rows=[r for ds in datasets for r in ds.rows])
    # Each row's file: its --data argument and source, so that two files of one name differ.
    file_of = [(i, r.source) for i, ds in enumerate(datasets) for r in ds.rows]
    if not combined.rows:
        raise ReplayFailed("the data holds no rows")
    seen: set[str] = set()
    rows, files = [], []
    if split is not None:
        from router.classify.data import split_of

        members = _MEMBERS.get(split, (split,))
    for r, f in zip(combined.rows, file_of):
        key = normalise_prompt(r.prompt)
        if split is not None and split_of(r.prompt) not in members:
            continue
        if key not in seen:
            seen.add(key)
            rows.append(r)
            files.append(f)
    if not rows:
        raise ReplayFailed(f"no row of the data is in the classifier's {split!r} split")
    if seed is not None:
        random.Random(seed).shuffle(rows)
    elif order == "interleaved":
        rows = interleave(rows, files)
    return ReplayPlan.build(combined, paths), rows[:n] if n else rows


def interleave(rows: list["OutcomeRow"], files: list | None = None) -> list["OutcomeRow"]:
    """The rows with each file's rows spread evenly over the run, each file's own order
    kept: a file's ``k``-th of ``n`` rows goes at ``(k + 0.5) / n`` of the way through
    (stride scheduling), ties in first-seen file order. So any stretch of the run, the first
    ``--n`` rows included, mixes the files in proportion, as a gateway serving them all at
    once would see them. ``files``: each row's file (any hashable, parallel to ``rows``);
    default its ``source`` (the file's stem). One file: the rows unchanged."""
    groups: dict = {}
    for r, f in zip(rows, files if files is not None else [r.source for r in rows], strict=True):
        groups.setdefault(f, []).append(r)
    if len(groups) < 2:
        return rows
    keyed = sorted(((k + 0.5) / len(g), i, k) for i, g in enumerate(groups.values()) for k in range(len(g)))
    members = list(groups.values())
    return [members[i][k] for _, i, k in keyed]


async def send_all(url: str, plan: "ReplayPlan", rows: list["OutcomeRow"], *, route: str = "auto",
                   concurrency: int = 8, api_key: str | None = None,
                   transport: "httpx.AsyncBaseTransport | None" = None,
                   progress: Callable[[int], None] | None = None, feedback: bool = False) -> list["Answered"]:
    """Send every row's prompt to ``url`` (``concurrency`` in flight); one result per row, in order.
    The first row goes alone: when a backend that is not a model of the data answers it, no
    other row is sent (every answer would be unscorable, and a real gateway bills them).

    Args:
        api_key: sent as ``Authorization: Bearer`` when given.
        transport: an httpx transport to use instead of the network (tests: ASGI).
        progress: called with the number of rows answered so far (1, 2, ... ``len(rows)``,
            failed requests included) after each answer, e.g. a :class:`Progress`.
        feedback: rate each scored answer with its recorded score (:func:`send_one`).

    Raises:
        ReplayFailed: the first row was answered by a backend the data does not record.
    """
    import httpx

    sem = asyncio.Semaphore(concurrency)
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(300.0, connect=10.0), headers=headers,
                                 transport=transport) as client:

        done = 0

        async def one(row: "OutcomeRow") -> "Answered":
            nonlocal done
            async with sem:
                answer = await send_one(client, plan, row, route, feedback)
            done += 1
            if progress is not None:
                progress(done)
            return answer

        if not rows:
            return []
        first = await send_one(client, plan, rows[0], route, feedback)
        if first.model is None and first.backend and first.error.endswith(NOT_IN_BACKEND_DATA):
            raise ReplayFailed(f"the first prompt was answered by backend {first.backend!r}, whose replay data does "
                               "not hold it; no other prompt was sent. Replay through a gateway whose replay "
                               "backends read --data's files (serve the policy `mixroute replay --write-policy FILE` "
                               "writes)")
        if first.model is None and first.backend:
            raise ReplayFailed(f"the first prompt was answered by backend {first.backend!r}, which is not a model "
                               f"of the data ({', '.join(plan.dataset.models)}); no other prompt was sent. Replay "
                               "through a gateway whose route's backends are the data's models (serve the policy "
                               "`mixroute replay --write-policy FILE` writes)")
        done = 1
        if progress is not None:
            progress(done)
        return [first, *await asyncio.gather(*(one(r) for r in rows[1:]))]


#: How an answer from a replay backend whose own data lacks the prompt is reported.
NOT_IN_BACKEND_DATA = "has no recorded answer for this prompt (its data is not --data's)"


async def send_one(client: "httpx.AsyncClient", plan: "ReplayPlan", row: "OutcomeRow", route: str,
                   feedback: bool = False) -> "Answered":
    """Send one prompt; map the answering backend to a data model. With ``feedback``, rate a
    scored answer on the gateway with the model's recorded score, before the next prompt
    (a failed rating is the answer's ``feedback_error``)."""
    import httpx

    from backends.replay.backend import placeholder_unknown_prompt
    from backends.replay.score import Answered

    body = {"model": route, "messages": [{"role": "user", "content": row.prompt}]}
    try:
        resp = await client.post("/v1/chat/completions", json=body)
    except httpx.HTTPError as exc:
        return Answered(row, None, error=f"{type(exc).__name__}: {exc}")
    if resp.status_code != 200:
        return Answered(row, None, error=f"HTTP {resp.status_code}: {_error_message(resp)}")
    backend = resp.headers.get("x-mixroute-backend", "")
    model = plan.model_of(backend)
    if model is None:
        with contextlib.suppress(ValueError):
            returned = resp.json().get("model")
            model = returned if returned in plan.dataset.models else None
    if model is None:
        return Answered(row, None, backend=backend,
                        error=f"backend {backend!r} is not a model of the data (models: {', '.join(plan.dataset.models)})")
    if _answer_text(resp) == placeholder_unknown_prompt(model):
        # The backend's own data does not hold this prompt (a --policy whose replay backends
        # read other files): scoring the --data row would credit an answer never given.
        return Answered(row, None, backend=backend,
                        error=f"backend {backend!r} {NOT_IN_BACKEND_DATA}")
    cost = resp.headers.get("x-mixroute-cost-usd")
    answered = Answered(row, model, backend=backend, gateway_cost_usd=float(cost) if cost else None)
    score = row.scores.get(model)
    if feedback and score is not None:
        rated = {"request_id": resp.headers.get("x-mixroute-request-id", ""), "score": score, "source": "replay"}
        try:
            fb = await client.post("/v1/feedback", json=rated)
            answered.feedback_error = None if fb.status_code == 202 else f"HTTP {fb.status_code}: {_error_message(fb)}"
        except httpx.HTTPError as exc:
            answered.feedback_error = f"{type(exc).__name__}: {exc}"
    return answered


def _answer_text(resp: "httpx.Response") -> str | None:
    try:
        return resp.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _error_message(resp: "httpx.Response") -> str:
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200]
