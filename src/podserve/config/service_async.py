"""The ModelService `async:` section: a `podserve consume` Deployment reading requests from
a Redis stream, scaled from zero on the stream's backlog by KEDA's `redis-streams` scaler
(docs/async.md; the scaler's keys from kedacore/keda-docs
content/docs/2.11/scalers/redis-streams.md, unchanged through the latest release)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from podserve.config.service_access import SecretKey
from podserve.config.service_base import _Spec

_STREAM = r"^[^\s]{1,256}$"


class AsyncRedis(_Spec):
    address: str = Field(
        pattern=r"^[A-Za-z0-9.-]+:[0-9]{1,5}$",
        description="Redis `host:port`, as the consumer and KEDA's scaler reach it.",
    )
    database: int = Field(0, ge=0, le=15, description="Redis database index.")
    tls: bool = Field(False, description="Connect with TLS (rediss://; KEDA enableTLS).")
    password: SecretKey | None = Field(
        None,
        description="Secret key holding the Redis password: mounted as a file for the consumer "
        "(`--redis-password-file`) and read by KEDA's scaler through a TriggerAuthentication.",
    )


class AsyncConsumer(_Spec):
    redis: AsyncRedis = Field(description="Where the streams live.")
    stream: str = Field(pattern=_STREAM, description="The request stream.")
    group: str = Field("podserve", pattern=_STREAM, description="The consumer group.")
    results_stream: str = Field(pattern=_STREAM, description="Where results are written.")
    dead_letter_stream: str | None = Field(
        None,
        pattern=_STREAM,
        description="Where entries that failed maxFailures times go, with their error. "
        "Unset: a failing entry is retried for ever (lint: consumer-no-dead-letter).",
    )
    max_failures: int = Field(3, ge=1, le=100, description="Failed attempts before dead-letter.")
    claim_idle_seconds: int = Field(
        30,
        ge=1,
        description="A pending entry idle this long (its consumer died) is claimed by another.",
    )
    results_retention_seconds: int = Field(
        86_400,
        ge=1,
        description="Results older than this are trimmed from the results stream, and a "
        "request id repeated within it gets no second result (`--results-ttl-s`).",
    )
    results_max_len: int = Field(
        1_000_000,
        ge=0,
        description="Cap on the results stream's length, trimmed approximately (`MAXLEN ~`, "
        "`--results-maxlen`); 0: no cap.",
    )
    delete_acknowledged: bool = Field(
        True,
        description="Delete request entries once answered and acknowledged "
        "(`--delete-acknowledged`; false: `--keep-acknowledged`). Right for a work queue, "
        "whose group is the stream's only reader; set false when another consumer group or "
        "an XREAD reader needs the entries, and trim the stream yourself.",
    )
    dead_letter_max_len: int = Field(
        100_000,
        ge=0,
        description="Cap on the dead-letter stream's length, trimmed approximately "
        "(`MAXLEN ~`, `--dead-letter-maxlen`); 0: no cap.",
    )
    min_replicas: int = Field(0, ge=0, description="0 scales the consumers to zero when idle.")
    max_replicas: int = Field(10, ge=1, description="Most consumer replicas.")
    scale_on: Literal["lag", "pendingEntries"] = Field(
        "lag",
        description="KEDA's metric: `lag` (entries not yet delivered to the group; Redis 7+; "
        "the only one that wakes from zero) or `pendingEntries` (delivered, not acknowledged).",
    )
    target_per_replica: int = Field(
        10, ge=1, description="Backlog per replica KEDA aims for (lagCount / pendingEntriesCount)."
    )
    activation: int = Field(
        0, ge=0, description="Backlog above which KEDA wakes the consumers from zero."
    )
    cooldown_seconds: int = Field(
        600,
        ge=0,
        description="Idle time before the last replica is removed (1 -> 0); a new replica "
        "pays the model's whole load, so not less than 600 (lint: scale-down-window-short).",
    )
    polling_interval_seconds: int = Field(15, ge=1, description="How often KEDA reads Redis.")
    grace_seconds: int | None = Field(
        None,
        ge=1,
        description="terminationGracePeriodSeconds of the consumers. Default: computed to "
        "let the entries in flight finish (two batches of serving.longestRequestSeconds).",
    )

    @model_validator(mode="after")
    def _replicas(self) -> AsyncConsumer:
        if self.min_replicas > self.max_replicas:
            raise ValueError("async.minReplicas must not exceed async.maxReplicas")
        return self
