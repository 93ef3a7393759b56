"""Refusing images that no backend of the request's model takes, before routing: a door
names the image in its own dialect's terms (``messages.0.content.1``, ``input.2.content.0``)
and gets a clear 400 instead of a backend's error, or a text-only model silently answering
without having seen the picture.
"""

from __future__ import annotations

from backends.hosted.sdk import load_litellm
from router.errors import InvalidRequest


def refuse_images(where: str | None, model: object, policy) -> None:
    """Refuse the image at ``where`` (``None``: the request has none) when every backend that
    ``model`` may reach is a hosted model that litellm's bundled map marks
    ``supports_vision: false``. Other backends, and models the map does not mark, are taken to
    accept images: only the backend knows what it serves, and its own error tells the client.

    Raises:
        InvalidRequest: ``param`` is ``where``.
    """
    if where is None or not isinstance(model, str):
        return
    route = policy.route(model)
    names = route.backends if route is not None else [model]
    configs = [c for c in (policy.backend(n) for n in names) if c is not None]
    if configs and not any(_takes_images(c) for c in configs):
        raise InvalidRequest(f"{where}: none of the backends '{model[:100]}' routes to ({', '.join(names)}) takes "
                             "images", param=where, code="unsupported_content_type")


def _takes_images(config) -> bool:
    if config.kind != "hosted":
        return True
    cost_map = load_litellm().model_cost
    for name in (config.model, config.model.split("/", 1)[-1]):
        entry = cost_map.get(name)
        if isinstance(entry, dict):
            return entry.get("supports_vision") is not False
    return True
