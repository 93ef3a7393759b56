"""JSON responses rendered with orjson (FastAPI deprecated its ``ORJSONResponse``)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


class FastJSONResponse(JSONResponse):
    """``application/json`` rendered by orjson (non-str dict keys allowed)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)
