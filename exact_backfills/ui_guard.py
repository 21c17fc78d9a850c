"""What the embedded UI answers: pages of its own origin, and clients that are not browsers.

Why this module: Dagster's webserver runs a GraphQL mutation passed in a GET's query string, and a POST of any content
type, and checks neither Host nor Origin (dagster_webserver/graphql.py). Any page a browser shows (an image, a form, a
script's no-cors request, a WebSocket) could then drive the UI on 127.0.0.1 from another site, or from another port
of this machine, and a site rebinding its name to 127.0.0.1 could read it. `dagster dev` has no setting to refuse
them; the production profile's proxy (scripts/ui.sh) refuses them in nginx. The embedded UI is served by the project
(exact_backfills/ui_server.py) behind this middleware, which refuses the same:
- a Host that is not the UI's own (a name rebound to 127.0.0.1);
- anything but a read (GET, HEAD), and any WebSocket, whose `Origin` or `Sec-Fetch-Site` says another origin;
- the API (`/graphql`) but as a POST of JSON or the UI's own WebSocket (a query in a GET's query string, a form).
A client that is not a browser sends neither header and passes; a browser sends one of them on every such request.
tests/test_ui.py drives the UI in Chromium through it and shows a page of another origin driving nothing."""

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
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


def own_origins(hosts: Iterable[str], more: Iterable[str] = ()) -> frozenset[str]:
    """The UI's own origins: `http://<host>` for each of `hosts` (host:port), and `more` as given (an address of
    its own a browser reaches it at, DAGSTER_UI_ORIGIN)."""
    return frozenset({*(f"http://{h}" for h in hosts), *(m.rstrip("/") for m in more if m)})


def refusal(asked: Asked, origins: frozenset[str]) -> str | None:
    """Why the embedded UI refuses `asked` (None: it answers it). `origins`: its own, `http://host:port`."""
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


class SameOrigin:
    """The ASGI middleware: what `refusal` refuses gets a 403 with its one line (a WebSocket is closed, 4403)."""

    def __init__(self, app: App, origins: frozenset[str]):
        self.app, self.origins = app, origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        why = refusal(Asked.of(scope), self.origins)
        if why is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4403, "reason": why[:120]})
        else:
            body = f"refused: {why}\n".encode()
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 403, "headers": headers})
            await send({"type": "http.response.body", "body": body})
