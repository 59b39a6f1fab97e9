"""API keys: random, shown once, stored as a SHA-256 digest.

A key carries 256 random bits, so a fast unsalted digest is enough to make the stored
value useless to whoever reads the database (a slow KDF guards low-entropy passwords, not
random tokens); LiteLLM stores its virtual keys the same way (litellm/proxy/_types.py,
`hash_token`). The key id is a prefix of the digest: safe to print, log and revoke by.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from dataclasses import dataclass

from podserve.config.gateway_config import BudgetPeriod

KEY_PREFIX = "psk-"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    key_hash: str
    team: str
    namespace: str
    models: tuple[str, ...]  # empty: every model
    budget_micro: int | None
    rpm: int | None
    tpm: int | None
    expires_at: float | None  # wall-clock seconds
    revoked: bool
    created_at: float
    budget_period: BudgetPeriod = BudgetPeriod.LIFETIME  # when `budget_micro` starts again

    def usable(self, wall_s: float) -> bool:
        return not self.revoked and (self.expires_at is None or wall_s < self.expires_at)

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key_hash: str) -> str:
    return key_hash[:12]


def new_key() -> tuple[str, str]:
    """(the key, shown once; its digest, stored)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key)


def as_found(record: KeyRecord, key_hash: str, previous_until: float | None) -> KeyRecord:
    """What a lookup by `key_hash` finds: the key itself, or, for the secret it had before
    its last rotation (`keys rotate --grace-s`), the same key expiring when that secret's
    grace ends. Budget, spend and limits are the key's either way: they belong to its id."""
    if key_hash == record.key_hash:
        return record
    ends = 0.0 if previous_until is None else previous_until
    expires = ends if record.expires_at is None else min(record.expires_at, ends)
    return dataclasses.replace(record, expires_at=expires)
