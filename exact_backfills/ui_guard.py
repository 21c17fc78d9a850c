"""What the embedded UI answers: its user, who holds its password, from pages of its own origin or clients that are
not browsers.

Why this module: Dagster's webserver runs a GraphQL mutation passed in a GET's query string, and a POST of any content
type, and checks neither Host nor Origin (dagster_webserver/graphql.py). Any page a browser shows (an image, a form, a
script's no-cors request, a WebSocket) could then drive the UI on 127.0.0.1 from another site, or from another port
of this machine, and a site rebinding its name to 127.0.0.1 could read it. `dagster dev` has no setting to refuse
them; the production profile's proxy (scripts/ui.sh) refuses them in nginx. And a port on 127.0.0.1 answers every
user of the machine. The embedded UI is served by the project (exact_backfills/ui_server.py) behind this middleware,
which refuses, as the proxy does:
- a request without the UI's password (HTTP basic authentication, which a browser keeps for the UI's origin alone and
  never sends to a server on another port), 401;
- a Host that is not the UI's own (a name rebound to 127.0.0.1);
- anything but a read (GET, HEAD), and any WebSocket, whose `Origin` or `Sec-Fetch-Site` says another origin;
- the API (`/graphql`) but as a POST of JSON or the UI's own WebSocket (a query in a GET's query string, a form).
A client that is not a browser sends neither header and passes with the password; a browser sends one of them on
every such request.
tests/test_ui.py drives the UI in Chromium through it and shows a page of another origin driving nothing."""

import base64
import hmac
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

API = "/graphql"
READS = ("GET", "HEAD")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Asked:
    """A request as the guard reads it: HTTP or a WebSocket's opening, its method, path, query and headers."""

    websocket: bool
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # names in lower case

    @classmethod
    def of(cls, scope: Scope) -> "Asked":
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = scope.get("query_string", b"").decode("latin-1")
        return cls(scope["type"] == "websocket", scope.get("method", "GET"), scope.get("path", "/"), query, headers)


@dataclass(frozen=True)
class Credentials:
    """The embedded UI's user and password, kept in a file of its user's alone (`user:password`)."""

    user: str
    password: str

    @classmethod
    def kept_in(cls, path: Path) -> tuple["Credentials", bool]:
        """The credentials in `path`, made there (readable by its user alone) when it holds none; and whether they were
        made now."""
        if not path.is_file() or not path.read_text().strip():
            path.parent.mkdir(parents=True, exist_ok=True)
            made = f"operator:{secrets.token_urlsafe(18)}\n"
            partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
            partial.touch(mode=0o600)
            partial.write_text(made)
            partial.replace(path)
            user, password = made.strip().split(":", 1)
            return cls(user, password), True
        user, password = path.read_text().strip().split(":", 1)
        return cls(user, password), False

    @property
    def header(self) -> str:
        """The Authorization header that carries them."""
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


@dataclass(frozen=True)
class Refusal:
    status: int  # 401: no password, or a wrong one; 403: refused whoever asks
    why: str


def own_origins(hosts: Iterable[str], more: Iterable[str] = ()) -> frozenset[str]:
    """The UI's own origins: `http://<host>` for each of `hosts` (host:port), and `more` as given (an address of
    its own a browser reaches it at, DAGSTER_UI_ORIGIN)."""
    return frozenset({*(f"http://{h}" for h in hosts), *(m.rstrip("/") for m in more if m)})


def refused(asked: Asked, origins: frozenset[str], credentials: Credentials) -> Refusal | None:
    """Why the embedded UI refuses `asked`, and with which status (None: it answers it)."""
    given = asked.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), credentials.header.encode()):
        return Refusal(401, "this UI answers its user alone: its password is in the file `bash scripts/demo.sh` names")
    why = refusal(asked, origins)
    return Refusal(403, why) if why else None


def refusal(asked: Asked, origins: frozenset[str]) -> str | None:
    """Why the embedded UI refuses `asked` whoever asks (None: it answers it). `origins`: its own, `http://host:port`."""
    host = asked.headers.get("host")
    if host is not None and f"http://{host}" not in origins and not _own_host(host, origins):
        return f"Host {host} is not this UI's own ({', '.join(sorted(origins))})"
    if asked.websocket or asked.method not in READS:
        origin, site = asked.headers.get("origin"), asked.headers.get("sec-fetch-site")
        if origin is not None and origin.rstrip("/") not in origins:
            return f"a request of another origin ({origin}); this UI answers its own pages only"
        if site is not None and site not in ("same-origin", "none"):
            return f"a request of another site (Sec-Fetch-Site: {site}); this UI answers its own pages only"
    if asked.path.rstrip("/") == API and not asked.websocket:
        if asked.method in READS and "query" in parse_qs(asked.query):
            return "the API takes a query only as a POST of JSON, never in a GET's query string"
        content_type = asked.headers.get("content-type", "").split(";")[0].strip().lower()
        if asked.method not in READS and content_type != "application/json":
            return f"the API takes a POST of JSON only, not {content_type or 'no content type'}"
    return None


def _own_host(host: str, origins: frozenset[str]) -> bool:
    """A Host naming one of the UI's own origins (an https one, DAGSTER_UI_ORIGIN)."""
    return any(o.split("://", 1)[-1] == host for o in origins)


class Guarded:
    """The ASGI middleware: what `refused` refuses gets its status with its one line (a WebSocket is closed)."""

    def __init__(self, app: App, origins: frozenset[str], credentials: Credentials):
        self.app, self.origins, self.credentials = app, origins, credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal_ = refused(Asked.of(scope), self.origins, self.credentials)
        if refusal_ is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4000 + refusal_.status, "reason": refusal_.why[:120]})
        else:
            body = f"refused: {refusal_.why}\n".encode()
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
            if refusal_.status == 401:  # a browser asks its user for the password
                headers.append((b"www-authenticate", b'Basic realm="exact-backfills", charset="UTF-8"'))
            await send({"type": "http.response.start", "status": refusal_.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
