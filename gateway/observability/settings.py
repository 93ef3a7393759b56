"""Settings of observability, read from the environment.

They live here rather than in :class:`gateway.settings.Settings` because the standard
``OTEL_*`` variables (no ``MIXROUTE_`` prefix) are part of them.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ObservabilitySettings(BaseSettings):
    """Observability switches.

    Attributes:
        otel: ``MIXROUTE_OTEL=1`` turns tracing on (OTLP export per the ``OTEL_*`` variables).
        otlp_endpoint: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``); setting
            it also turns tracing on.
        sdk_disabled: ``OTEL_SDK_DISABLED=true`` turns tracing off whatever else is set.
        service_name_from_env: ``OTEL_SERVICE_NAME`` or a ``service.name`` in
            ``OTEL_RESOURCE_ATTRIBUTES`` is set (else the service is named ``mixroute``).
    """

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    otel: bool = Field(default=False, validation_alias=AliasChoices("MIXROUTE_OTEL"))
    otlp_endpoint: str | None = Field(default=None, validation_alias=AliasChoices(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
    sdk_disabled: bool = Field(default=False, validation_alias=AliasChoices("OTEL_SDK_DISABLED"))
    service_name: str | None = Field(default=None, validation_alias=AliasChoices("OTEL_SERVICE_NAME"))
    resource_attributes: str = Field(default="", validation_alias=AliasChoices("OTEL_RESOURCE_ATTRIBUTES"))

    @property
    def tracing_enabled(self) -> bool:
        return not self.sdk_disabled and (self.otel or bool(self.otlp_endpoint))

    @property
    def service_name_from_env(self) -> bool:
        return bool(self.service_name) or "service.name=" in self.resource_attributes
