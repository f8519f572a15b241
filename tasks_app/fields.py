"""A model field that stores its text encrypted at rest (Fernet, with key rotation).

The column holds "fernet:" + a Fernet token (AES-128-CBC + HMAC-SHA256, from
`cryptography`); the model attribute holds the plain text. Keys come from
settings.FIELD_ENCRYPTION_KEYS: the first one encrypts, every one decrypts, so
a new key goes first and the old ones stay behind it until no row uses them.
With no keys set, one key is derived from SECRET_KEY (and SECRET_KEY_FALLBACKS
for decryption) with HKDF, so the embedded default works with no setup.

- The empty string is stored as is: "no secret" needs no ciphertext.
- Every other value written is encrypted, also one that looks like ciphertext:
  storing a caller's value verbatim would let whoever can read a ciphertext have
  the platform decrypt it for them. Only a value read from the database that
  could not be decrypted (`Undecryptable`) is written back unchanged.
- A column value no key decrypts (the key was lost or changed) reads as an
  `Undecryptable`: an empty string that carries the ciphertext, so pages render
  and the code that needs the secret can tell (see push._post).
- A column value without the prefix is plain text from before encryption (rows
  the data migration has not reached); it reads as itself and is encrypted on
  the next save.
- Ciphertext differs on every write, so the field supports no lookups but isnull.
"""

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models

PREFIX = "fernet:"
# HKDF context of the key derived from SECRET_KEY; changing it would orphan every stored value.
_DERIVATION_SALT = b"a2a_platform.fields.EncryptedTextField"
_DERIVATION_INFO = b"FIELD_ENCRYPTION_KEYS default v1"


class Undecryptable(str):
    """A stored value no configured key decrypts: reads as "", keeps the ciphertext for re-saving."""

    ciphertext: str

    def __new__(cls, ciphertext: str) -> "Undecryptable":
        value = super().__new__(cls, "")
        value.ciphertext = ciphertext
        return value

    def __repr__(self) -> str:
        return "<undecryptable>"


def derive_key(secret: str) -> bytes:
    """A Fernet key derived from a secret (SECRET_KEY) with HKDF-SHA256."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_DERIVATION_SALT, info=_DERIVATION_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(secret.encode()))


def configured_keys() -> tuple[str, ...]:
    """FIELD_ENCRYPTION_KEYS as a tuple (a list, or a comma-separated string); empty if unset."""
    keys = getattr(settings, "FIELD_ENCRYPTION_KEYS", None) or ()
    if isinstance(keys, str):
        keys = keys.split(",")
    return tuple(key.strip() for key in keys if key.strip())


def fernet() -> MultiFernet:
    """The MultiFernet of the current settings (cached per settings, so override_settings works)."""
    keys = configured_keys()
    if keys:
        return _fernet_from_keys(keys)
    secrets = (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ()))
    return _fernet_from_secrets(tuple(secrets))


@lru_cache(maxsize=8)
def _fernet_from_keys(keys: tuple[str, ...]) -> MultiFernet:
    fernets = []
    for position, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"FIELD_ENCRYPTION_KEYS: key {position} is not a Fernet key (32 url-safe base64-encoded"
                " bytes); make one with: python -c 'from cryptography.fernet import Fernet;"
                " print(Fernet.generate_key().decode())'"
            ) from None
    return MultiFernet(fernets)


@lru_cache(maxsize=8)
def _fernet_from_secrets(secrets: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(derive_key(secret)) for secret in secrets])


def encrypt(plain: str, crypto: MultiFernet | None = None) -> str:
    """The column value of a plain text: "" for "", else the prefix and a token of the first key."""
    if plain == "":
        return ""
    token = (crypto or fernet()).encrypt(plain.encode())
    return PREFIX + token.decode("ascii")


def decrypt(stored: str, crypto: MultiFernet | None = None) -> str:
    """The plain text of a column value; Undecryptable if no key opens it. Unprefixed is plain text."""
    if not stored.startswith(PREFIX):
        return stored
    try:
        return (crypto or fernet()).decrypt(stored[len(PREFIX) :].encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        return Undecryptable(stored)


def is_encrypted(stored: str) -> bool:
    """Whether a column value is ciphertext (whichever key made it)."""
    return stored.startswith(PREFIX)


class EncryptedTextField(models.TextField):
    """A TextField whose column holds the ciphertext of the attribute's text. See the module docstring."""

    description = "Text encrypted at rest"

    def from_db_value(self, value, expression, connection):
        if value is None:
            return value
        return decrypt(value)

    def get_prep_value(self, value):
        if isinstance(value, Undecryptable):
            return value.ciphertext  # never encrypt twice: it is ciphertext already
        value = super().get_prep_value(value)
        if value is None:
            return value
        return encrypt(value)

    def get_lookup(self, lookup_name):
        # An exact or contains lookup would compare against fresh ciphertext and never match.
        if lookup_name != "isnull":
            return None
        return super().get_lookup(lookup_name)


@checks.register()
def check_field_encryption_keys(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """`manage.py check` (and migrate) refuse keys that are not Fernet keys.

    In production (DEBUG off) a key derived from SECRET_KEY is a warning: a new
    SECRET_KEY would make every stored webhook secret unreadable.
    """
    try:
        fernet()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="tasks_app.E001")]
    if not settings.DEBUG and not settings.FIELD_ENCRYPTION_KEYS:
        return [
            checks.Warning(
                "FIELD_ENCRYPTION_KEYS is not set: webhook secrets are encrypted with a key derived "
                "from SECRET_KEY, and a new SECRET_KEY will make them unreadable.",
                hint="Set FIELD_ENCRYPTION_KEYS (or FIELD_ENCRYPTION_KEYS_FILE) to your own Fernet key.",
                id="tasks_app.W001",
            )
        ]
    return []
