"""Where a store lives, and how to name it without its secrets.

``parse_target(text)`` classifies a store location once, for ``open_store`` and for
anything that prints it (the CLI, error messages, logs):

* ``memory:`` (also ``memory://``, ``:memory:``) -> memory;
* ``postgresql://`` / ``postgres://`` URLs and libpq keyword strings
  (``host=db user=me password=...``) -> PostgreSQL. A keyword string is never taken as a
  file name: a path made only of ``key=value`` words whose keys include a libpq
  connection keyword is refused as a SQLite path;
* ``sqlite:///abs/path``, ``sqlite:rel/path`` or a plain path -> SQLite.

``redact(text, secrets)`` masks passwords in any text: the password of a URL's user
info, ``password=`` in a URL query or a keyword string, and every literal occurrence of
the given secret values (so a driver's error message that quotes part of a connection
string does not leak it either).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "StoreTarget", "is_keyword_string", "parse_target", "redact", "split_schema"]

MASK = "***"

#: libpq connection keywords (PostgreSQL docs, "Parameter Key Words"); one of them must
#: appear for a ``key=value`` string to be read as a connection string.
_LIBPQ_KEYWORDS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "sslmode",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslrootcert",
        "sslcrl",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
        "gssencmode",
        "krbsrvname",
    }
)

#: Keywords whose values are secrets (in a keyword string or a URL query).
_SECRET_KEYS = ("password", "sslpassword")

# one ``key = value`` pair of a libpq keyword string (value bare or single-quoted)
_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)\s*")
# a secret keyword and its value, in a keyword string or a URL query
_SECRET_VALUE = re.compile(
    r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]*)",
)
# the password of a URL's user info: scheme://user:PASSWORD@host. Linear in the text: a
# try starts only where a run of scheme characters starts (the lookbehind), skips the run's
# leading non-letters (kept by the substitution), and its possessive quantifiers never
# backtrack. The plain form, ``([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):([^@\s]*)@``, masks
# the same places, but rescans from every letter: quadratic in a long line of letters
# (8 ms per 1 KB log line; minutes for `chongming logs` of a 10 MB log).
_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<lead>[0-9+.-]*+)"
    r"(?P<user>[A-Za-z][A-Za-z0-9+.-]*+://[^:/@\s]*+):(?P<password>[^@\s]*+)@"
)

#: Secret values shorter than this are masked only where they appear structurally
#: (a one-letter password would otherwise mask every occurrence of that letter).
_MIN_LITERAL = 3


@dataclass(frozen=True)
class StoreTarget:
    """A classified store location."""

    kind: Literal["memory", "sqlite", "postgres"]
    #: what the backend is opened with: a file path, or the PostgreSQL URL/keyword string
    location: str
    #: safe to print: the location with its passwords masked
    display: str
    #: literal secret values found in the location (masked wherever they appear)
    secrets: tuple[str, ...] = ()


def _keyword_pairs(text: str) -> list[tuple[str, str]] | None:
    """``text`` as libpq ``key=value`` pairs, or None if it is not such a string."""
    pairs: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if m is None or m.end() == pos:
            return None
        pairs.append((m.group(1), m.group(2)))
        pos = m.end()
    return pairs or None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _url_secrets(text: str) -> list[str]:
    from urllib.parse import unquote

    found: list[str] = []
    for m in _USERINFO.finditer(text):
        found += [m["password"], unquote(m["password"])]
    for m in _SECRET_VALUE.finditer(text):
        raw = m.group(2)
        found += [raw, unquote(raw), _unquote(raw)]
    return found


def _secrets_of(text: str) -> tuple[str, ...]:
    values = {v for v in _url_secrets(text) if v and v != MASK}
    return tuple(sorted(values, key=len, reverse=True))  # longest first


def redact(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """``text`` with passwords masked (see the module docstring)."""
    # Each pattern is tried only where a literal that any of its matches holds appears:
    # "://" for a URL's user info, "password" (case-folded: every character the pattern
    # takes for one of its letters folds to that letter) for ``password=``. A long
    # listing without either is passed through at the speed of a substring search.
    out = text
    if "://" in out:
        out = _USERINFO.sub(rf"\g<lead>\g<user>:{MASK}@", out)
    if "password" in out.casefold():
        out = _SECRET_VALUE.sub(rf"\g<1>{MASK}", out)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_LITERAL:
            out = out.replace(secret, MASK)
    return out


def is_keyword_string(text: str) -> bool:
    """Is ``text`` a libpq keyword connection string (``host=... dbname=...``)?"""
    pairs = _keyword_pairs(text.strip())
    return pairs is not None and any(k.lower() in _LIBPQ_KEYWORDS for k, _ in pairs)


def parse_target(raw: str) -> StoreTarget:
    """Classify a store location (see the module docstring). Raises ValueError with a
    message safe to print when the text names no store."""
    text = raw.strip()
    if not text:
        raise ValueError("store location is empty; give a path or a URL")
    lower = text.lower()
    if lower in ("memory:", "memory://", ":memory:"):
        return StoreTarget("memory", text, text)
    if lower.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")) or (
        "://" not in text and is_keyword_string(text)
    ):
        secrets = _secrets_of(text)
        return StoreTarget("postgres", text, redact(text, secrets), secrets)
    if lower.startswith("sqlite:"):
        rest = text[len("sqlite:") :]
        if rest.startswith("///"):
            # sqlite:///abs/path (and SQLAlchemy's sqlite:////abs/path) -> /abs/path
            path = "/" + rest.lstrip("/")
        elif rest.startswith("//"):
            raise ValueError(
                f"store URL {redact(text)!r}: use sqlite:///absolute/path or sqlite:relative/path"
            )
        else:
            path = rest
        if not path:
            raise ValueError(f"store URL {redact(text)!r} names no file")
        return StoreTarget("sqlite", path, redact(path))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ValueError(
            f"unknown store scheme {scheme!r} in {redact(text)!r}; "
            "use memory:, sqlite:///path, a path, or postgresql://..."
        )
    if _SECRET_VALUE.search(text):
        # not a keyword string, yet it carries a password: never a file name
        raise ValueError(
            f"store location {redact(text)!r} holds a password but is not a PostgreSQL "
            "URL or keyword string; refusing to use it as a file name"
        )
    return StoreTarget("sqlite", text, text)


def split_schema(url: str, schema: str | None) -> tuple[str, str]:
    """Separate our ``schema=`` parameter from the libpq URL (or keyword string)."""
    if is_keyword_string(url):
        return url, schema or "chongming"
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    found = [v for k, v in params if k == "schema"]
    kept = [(k, v) for k, v in params if k != "schema"]
    chosen = schema or (found[-1] if found else "chongming")
    clean = urlunsplit(parts._replace(query=urlencode(kept)))
    return clean, chosen
