"""An adapter version's outcome-memory correction: the memory's sums, baked at a time.

``mixroute train --from-logs`` tallies the observations of a log (:func:`router.learning.memory.tally`)
up to ``trained_until`` and writes them to the version's ``outcomes.json``. A gateway on
that version counts them as if it had read those observations itself: the sums ``A``,
``B``, ``E``, ``S`` of the memory are sums of ``c_i = weight x 2 ** (-age / half_life)``
terms, so the whole baked tally ages by one factor, ``2 ** (-(now - trained_until) /
half_life)``, and adds to the tally of the live observations after ``trained_until``
(those before it are already in it, so they are not read again). The result is the memory
the live loop would have built from the full log, without the log.

The version may also carry per-domain offsets (``offsets``: backend -> domain -> a shift
of the estimate; :func:`router.learning.from_logs.domain_offsets`), which do not age: they
describe the estimates, not the traffic.

File shape::

    {"trained_until": ISO time, "half_life_hours": 168,
     "tallies": {"backend": {"weight": A, "square": B, "error": E, "score": S}},
     "offsets": {"backend": {"domain": shift}}}
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from router.learning.memory import Tally

OUTCOMES_FILE = "outcomes.json"


class BakedError(Exception):
    """An unreadable ``outcomes.json``; ``str()`` is the one line to show."""


@dataclass(frozen=True)
class Baked:
    """A version's correction (module docstring); times UTC."""

    trained_until: datetime
    tallies: dict[str, Tally] = field(default_factory=dict)
    offsets: dict[str, dict[str, float]] = field(default_factory=dict)

    def aged(self, now: datetime, half_life_hours: float) -> dict[str, Tally]:
        """The tallies at ``now``: every sum times ``2 ** (-age / half_life)``; the square
        ``B`` by the same factor, since each of its terms carries ``c_i`` once."""
        age_s = max((now - self.trained_until).total_seconds(), 0.0)
        f = 2.0 ** (-age_s / (half_life_hours * 3600.0))
        return {b: Tally(t.weight * f, t.square * f, t.error * f, t.score * f) for b, t in self.tallies.items()}

    def save(self, path: Path, half_life_hours: float) -> None:
        data = {"trained_until": self.trained_until.isoformat(), "half_life_hours": half_life_hours,
                "tallies": {b: asdict(t) for b, t in sorted(self.tallies.items())},
                "offsets": {b: dict(sorted(o.items())) for b, o in sorted(self.offsets.items())}}
        path.write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> "Baked":
        """Raises: BakedError: the file is missing, not JSON, or a sum is not a finite number."""
        try:
            data = json.loads(path.read_text())
            until = datetime.fromisoformat(data["trained_until"])
            tallies = {}
            for backend, t in data["tallies"].items():
                values = [float(t[k]) for k in ("weight", "square", "error", "score")]
                if not all(math.isfinite(v) for v in values) or values[0] < 0 or values[1] < 0:
                    raise ValueError(f"backend {backend!r}: sums must be finite, weights not negative")
                tallies[str(backend)] = Tally(*values)
            offsets = {str(b): {str(d): _shift(v) for d, v in o.items()} for b, o in data.get("offsets", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BakedError(f"{path}: not an outcome correction ({type(exc).__name__}: {exc})") from None
        if until.tzinfo is None:
            raise BakedError(f"{path}: trained_until has no time zone")
        return cls(until, tallies, offsets)


def _shift(value: object) -> float:
    shift = float(value)  # type: ignore[arg-type]
    if not -1.0 <= shift <= 1.0:  # NaN included
        raise ValueError(f"offset {value!r} is not a number in [-1, 1]")
    return shift


def combine(*parts: dict[str, Tally]) -> dict[str, Tally]:
    """Per-backend sums of several tallies."""
    out: dict[str, list[float]] = {}
    for part in parts:
        for b, t in part.items():
            acc = out.setdefault(b, [0.0, 0.0, 0.0, 0.0])
            acc[0] += t.weight
            acc[1] += t.square
            acc[2] += t.error
            acc[3] += t.score
    return {b: Tally(*v) for b, v in out.items()}
