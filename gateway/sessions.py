"""Session identity and shared session state for the gateway.

Which conversation a request continues (:func:`session_hint`): the ``x-mixroute-session``
header, else the id its door names (Anthropic's ``metadata.user_id``), else the body's OpenAI
``prompt_cache_key``, else its ``user``. Else, for a request continuing an earlier answer (the
Responses door's ``previous_response_id``), that answer's session: each answer leaves a link
from its id to its session. Else, a request whose message list extends a recent request's
(same tenant, same route) continues that request's session: each request leaves the hash of
its message list (its *lineage* key), and a later request looks up the hashes of its own list
shortened by one to :data:`LINEAGE_DEPTH` messages (the previous turn's list plus its answer
and the new input).

Every key is scoped to the tenant and the route, so a session id never joins another
tenant's session. State lives in process (:class:`router.session.InProcessSessions`) or, with
``MIXROUTE_REDIS_URL``, in Redis (:class:`RedisSessions`), so that every replica sees it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
import unicodedata
from dataclasses import dataclass

import orjson

from router.errors import InvalidRequest
from router.session import InProcessSessions, SessionState, SessionStore, answered_tokens

log = logging.getLogger("mixroute.sessions")

HEADER = "x-mixroute-session"
#: Longest session id accepted (characters).
MAX_ID = 256
#: How many trailing messages a continuing request may have added since the turn it extends.
LINEAGE_DEPTH = 8


def session_hint(headers, body: dict, door_hint: str | None = None) -> tuple[str | None, bool]:
    """``(id, explicit)``: the session the client names, or ``(None, False)``.

    Args:
        door_hint: the id the request's door found in its dialect
            (:attr:`gateway.doors.base.DoorCall.session_hint`), already prefixed with its field.

    Raises:
        InvalidRequest: the header is over :data:`MAX_ID` characters, blank, or holds control
            characters (C0, DEL or C1: a header arrives decoded as Latin-1).
    """
    sid = headers.get(HEADER)
    if sid is not None:
        if len(sid) > MAX_ID or any(unicodedata.category(ch) == "Cc" for ch in sid) or not sid.strip():
            raise InvalidRequest(f"The {HEADER} header must be 1 to {MAX_ID} printable characters",
                                 param=HEADER, code="invalid_session")
        return sid, True
    if isinstance(door_hint, str) and door_hint.strip():
        return door_hint[:MAX_ID], True
    for field in ("prompt_cache_key", "user"):
        value = body.get(field)
        if isinstance(value, str) and value.strip():
            return f"{field}:{value[:MAX_ID]}", True
    return None, False


def _scope(tenant: str | None, route: str) -> bytes:
    return orjson.dumps([tenant or "", route])


def session_key(tenant: str | None, route: str, sid: str) -> str:
    """The store key of session ``sid`` (tenant- and route-scoped, fixed length)."""
    return hashlib.sha256(_scope(tenant, route) + b"\x00" + sid.encode()).hexdigest()


def link_key(tenant: str | None, route: str, answer_id: str) -> str:
    """The lineage key linking an answer's id (a Responses ``resp_...`` id) to its session."""
    return hashlib.sha256(_scope(tenant, route) + b"\x01" + answer_id.encode()).hexdigest()


def lineage_keys(tenant: str | None, route: str, messages: list) -> list[str]:
    """Hashes of the message list's prefixes, longest first: ``[full, minus 1, ..., minus
    LINEAGE_DEPTH]`` (at least one message each). Each message counts by its role and
    content (text and tool calls), as a client resends it."""
    h = hashlib.sha256(_scope(tenant, route))
    prefixes = []
    for m in messages:
        if isinstance(m, dict):
            h.update(orjson.dumps([m.get("role"), m.get("content"), m.get("tool_calls"), m.get("tool_call_id")],
                                  option=orjson.OPT_SORT_KEYS))
        prefixes.append(h.hexdigest())
    return prefixes[::-1][: LINEAGE_DEPTH + 1]


@dataclass
class Ticket:
    """A request's place in its session, from lookup to the end of its answer."""

    key: str
    state: SessionState
    lineage: str | None
    idle_s: float
    links: tuple[str, ...] = ()


class Sessions:
    """Looks sessions up before the decision and moves them on after the answer."""

    def __init__(self, store: SessionStore | None = None):
        self.store = store or InProcessSessions()

    async def open(self, router, tenant: str | None, headers, body: dict, *, hint: str | None = None,
                   follows: str | None = None, answer_id: str | None = None) -> Ticket | None:
        """The request's session, or ``None`` when its ``model`` is not a route with sessions on.

        Args:
            hint: an explicit id the door found (:func:`session_hint`).
            follows: the id of an earlier answer this request continues (its session goes on).
            answer_id: the id under which a later request may continue this one's answer.

        Raises:
            InvalidRequest: a malformed session header (:func:`session_hint`).
        """
        sid, explicit = session_hint(headers, body, hint)
        model = body.get("model") or router.policy.default_route
        route = router.policy.route(model) if isinstance(model, str) else None
        if route is None or not route.session.enabled:
            return None
        idle = float(route.session.idle_s)
        messages = body.get("messages")
        lineage = lineage_keys(tenant, route.name, messages) if isinstance(messages, list) and messages else []
        key = None
        if sid is not None:
            key = session_key(tenant, route.name, sid)
        else:
            wanted = [link_key(tenant, route.name, follows)] if follows else []
            wanted += lineage[1:]
            key = await self.store.find_lineage(wanted, idle) if wanted else None
        state = await self.store.get(key, idle) if key is not None else None
        if state is None:
            if key is None:
                if not lineage:
                    return None
                # A new implicit session: two conversations that open with the same prompt
                # are two sessions, so its key is new rather than derived from the prompt.
                key = secrets.token_hex(16)
            state = SessionState(id=sid or key[:16], explicit=explicit)
        links = (link_key(tenant, route.name, answer_id),) if answer_id else ()
        return Ticket(key=key, state=state, lineage=lineage[0] if lineage else None, idle_s=idle, links=links)

    async def close(self, ticket: Ticket, backend: str | None, ok: bool, tokens_in: int, text_out: str = "",
                    tokens_out: int | None = None, replica: str | None = None) -> None:
        """Move the session on after a turn: the backend that answered holds its prefix now."""
        if not ok or backend is None:
            return
        state = ticket.state
        if state.backend is not None and backend != state.backend:
            state.switches += 1
        state.backend = backend
        state.turns += 1
        state.prefix_tokens = answered_tokens(tokens_in, text_out, tokens_out)
        state.replica = replica or state.replica
        state.last_seen = time.time()
        state.held[backend] = [state.prefix_tokens, state.last_seen]
        try:
            await self.store.put(ticket.key, state, ticket.idle_s)
            for link in (ticket.lineage, *ticket.links):
                if link is not None:
                    await self.store.add_lineage(link, ticket.key, ticket.idle_s)
        except Exception as exc:  # shared state is an optimisation: the answer already went out
            log.warning("session state not saved (%s: %s)", type(exc).__name__, exc)


class RedisSessions:
    """Session state in Redis, shared by every gateway replica; keys expire after ``idle_s``."""

    def __init__(self, url: str, prefix: str = "mixroute", timeout_s: float = 1.0):
        import redis.asyncio as aioredis

        self.prefix = prefix
        self._redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._seen: dict[str, float] = {}

    async def get(self, key: str, idle_s: float) -> SessionState | None:
        from redis.exceptions import RedisError

        try:
            raw = await self._redis.get(f"{self.prefix}:sess:{key}")
        except (RedisError, OSError) as exc:
            log.warning("session lookup failed (%s); deciding the request alone", type(exc).__name__)
            return None
        return SessionState.from_dict(orjson.loads(raw)) if raw else None

    async def put(self, key: str, state: SessionState, idle_s: float) -> None:
        await self._redis.set(f"{self.prefix}:sess:{key}", orjson.dumps(state.to_dict()), ex=max(1, int(idle_s)))
        now = time.time()
        self._seen[key] = now + idle_s
        if len(self._seen) > 10_000:
            self._seen = {k: t for k, t in self._seen.items() if t > now}

    async def find_lineage(self, keys: list[str], idle_s: float) -> str | None:
        from redis.exceptions import RedisError

        if not keys:
            return None
        try:
            found = await self._redis.mget([f"{self.prefix}:lin:{k}" for k in keys])
        except (RedisError, OSError):
            return None
        return next((v.decode() for v in found if v), None)

    async def add_lineage(self, key: str, session_key: str, idle_s: float) -> None:
        await self._redis.set(f"{self.prefix}:lin:{key}", session_key, ex=max(1, int(idle_s)))

    def live(self) -> int:
        """Sessions this replica saw within their idle time (Redis holds every replica's)."""
        now = time.time()
        return sum(1 for t in self._seen.values() if t > now)

    async def aclose(self) -> None:
        await self._redis.aclose()
