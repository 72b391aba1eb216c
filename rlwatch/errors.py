"""One error hierarchy. The CLI turns any of these into a one-line message and exit code 2."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The CI contract: what rlwatch's exit status means."""

    HEALTHY = 0  # nothing at or above --fail-on is firing
    UNHEALTHY = 1  # an error verdict (at or above --fail-on) fired
    FAILED = 2  # rlwatch could not do its job: bad input, unreadable source, crash


class RlwatchError(Exception):
    """Base class: rlwatch could not do its job. Carries a one-line, user-facing message."""

    exit_code = ExitCode.FAILED


class UsageError(RlwatchError):
    """Bad arguments or configuration."""


class SourceError(RlwatchError):
    """A source (log directory, event file, tracking server) could not be read."""


class RuleFileError(RlwatchError):
    """A rule or metrics file is invalid; points at file:line:col."""

    def __init__(self, message: str, path: str, line: int | None = None, col: int | None = None):
        self.path, self.line, self.col = path, line, col
        where = path if line is None else f"{path}:{line}:{col or 1}"
        super().__init__(f"{where}: {message}")


# -- secrets: never print a credential ------------------------------------------------------
import re as _re  # noqa: E402

_SECRETS: set[str] = set()
# scheme://userinfo@host — userinfo runs to the LAST '@' that is followed by a host, so a
# password holding unencoded '@ # / ? :' is still caught whole
_USERINFO = _re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s'\"<>]*@)"
    r"(?=[A-Za-z0-9.\-_~%]+|\[[0-9A-Fa-f:.]+\])"
)
_HOST_AFTER = _re.compile(r"(?:[A-Za-z0-9.\-_~%]+|\[[0-9A-Fa-f:.]+\])(?::\d*)?(?:[/?#\s'\"]|$)")


def split_userinfo(uri: str) -> tuple[str, str, str] | None:
    """(scheme://, userinfo, host and the rest) of a URI with credentials, else None.

    Unlike urllib, the userinfo runs to the last '@' before a host, so a password with an
    unencoded '@', '#', '/', '?' or ':' in it is found whole.
    """
    m = _re.match(r"([A-Za-z][A-Za-z0-9+.\-]*://)(.*)$", uri.strip(), _re.S)
    if not m:
        return None
    scheme, rest = m.groups()
    for i in range(len(rest) - 1, -1, -1):
        if rest[i] == "@" and _HOST_AFTER.match(rest, i + 1):
            return scheme, rest[:i], rest[i + 1 :]
    return None


def register_secret_uri(uri: str | None) -> None:
    """Remember the credentials of a URI so that every message can have them removed."""
    import base64
    import urllib.parse

    if not uri:
        return
    parts = split_userinfo(uri)
    if parts is None:
        return
    userinfo = parts[1]
    user, _, password = userinfo.partition(":")
    found = {userinfo, password}
    for s in list(found):
        found |= {urllib.parse.unquote(s), urllib.parse.quote(s, safe=""), urllib.parse.quote(s)}
    plain = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    found.add(base64.b64encode(plain.encode()).decode())
    _SECRETS.update(s for s in found if len(s) >= 3)


def register_secret(value: str | None) -> None:
    """Remember a secret value (an API key, a password) to redact it from every message."""
    if value and len(value) >= 3:
        _SECRETS.add(value)


def redact_secrets(text: str) -> str:
    """`text` with credentials removed: the userinfo of any URI and every registered secret."""
    if not text:
        return text
    out = []
    pos = 0
    for m in _re.finditer(r"\b[A-Za-z][A-Za-z0-9+.\-]*://", text):
        if m.start() < pos:
            continue
        end = len(text)
        ws = _re.search(r"[\s'\"<>]", text[m.end() :])
        if ws:
            end = m.end() + ws.start()
        parts = split_userinfo(text[m.start() : end])
        if parts is not None:
            out.append(text[pos : m.start()] + parts[0] + "***@" + parts[2])
            pos = end
    out.append(text[pos:])
    text = "".join(out)
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s in text:
            text = text.replace(s, "***")
    return text


def one_line(message: str, limit: int = 400) -> str:
    """A message as one short line: newlines folded, hostile lengths cut, secrets redacted."""
    text = " ".join(redact_secrets(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
