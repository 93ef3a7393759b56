"""``GET /healthz`` (the process is up) and ``GET /readyz`` (200 only once the policy and
router are loaded; 503 before, and while the key store has never answered whether keys
exist, when every request would be refused with ``auth_unavailable``, and while the store
can keep no records and new requests are refused with ``store_unavailable``). Both answer ``HEAD`` too: the same status and headers, no
body (load balancers and uptime checkers often probe with ``HEAD``)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.auth.guard import AuthUnavailable
from gateway.responses import FastJSONResponse

router = APIRouter()


@router.get("/healthz")
@router.head("/healthz", include_in_schema=False)  # one schema entry, no duplicate operation id
async def healthz():
    return FastJSONResponse({"status": "ok"})


@router.get("/readyz")
@router.head("/readyz", include_in_schema=False)
async def readyz(request: Request):
    runtime = request.app.state.policies.current
    if runtime is None or not request.app.state.ready:
        return FastJSONResponse({"status": "starting"}, status_code=503)
    auth = getattr(request.app.state, "auth", None)
    if auth is not None:
        try:
            await auth.required()  # cached for the key cache TTL
        except AuthUnavailable:
            # The store never said whether keys exist, so every request is refused with 503
            # auth_unavailable: a load balancer must not send this replica traffic.
            return FastJSONResponse({"status": "auth_unavailable", "detail": "the key store cannot be read"},
                                    status_code=503)
    store = getattr(request.app.state, "store", None)
    if store is not None and request.app.state.settings.store_on_loss == "refuse" and not store.keeps_records():
        return FastJSONResponse({"status": "store_unavailable",
                                 "detail": "the database is down and the journal is full"}, status_code=503)
    predictor = runtime.router.predictor
    predictor = getattr(predictor, "inner", predictor)  # the tracing wrapper's inner predictor
    body = {"status": "ready", "policy_hash": runtime.loaded.hash, "predictor": type(predictor).__name__}
    encoder = getattr(predictor, "encoder", None)
    if encoder is not None:  # which precision the classifier really runs (settings resolve per machine)
        body["classifier"] = {"dtype": str(encoder.dtype).removeprefix("torch."), "linear": encoder.linear,
                              "heads": [h.name for h in encoder.heads], "scan_chars": encoder.scan_chars}
        memory = getattr(predictor, "memory", None)
        if memory is not None:  # the outcome memory the quality estimates read (router/classify/memory.py)
            body["classifier"]["memory"] = {
                "rows": memory.n, "k": memory.k, "kappa": memory.kappa, "digest": memory.digest,
                "task_smoothing": memory.smoothing_in_force,
                "exclude_exact": bool(getattr(predictor, "exclude_exact", False))}
    return FastJSONResponse(body)
