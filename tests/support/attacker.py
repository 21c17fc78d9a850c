"""A page of another origin, as any local user can serve one on another port of 127.0.0.1, that tries every way a page
has to drive a UI it does not belong to: the production profile's (tests/test_cluster_profile.py) and the embedded
one's (tests/test_ui.py)."""

import http.server
import json
import ssl
import subprocess
import threading
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

from exact_backfills.dagster_names import ROLLBACK_JOB

# Each way a page can send a request without the UI's consent (an image's GET, forms posting text and url-encoded
# fields, a script's no-cors POST, a WebSocket), each asking for a mutation by the query string the webserver reads.
# Served on another port of this host, as any local user can serve one: the same site as the UI, so a browser holding
# credentials for the UI (the production profile's password) attaches them; it keeps them from a page of another site.
ATTACKS = ("get", "form-text", "form-urlencoded", "fetch-no-cors")
ATTACK_PAGE = """<!doctype html><html><body><iframe name="sink"></iframe>
<form id="form-text" method="POST" target="sink" enctype="text/plain"><input name="x" value="y"></form>
<form id="form-urlencoded" method="POST" target="sink"><input name="x" value="y"></form>
<script>
const urls = URLS;
const said = {};
function settle(promise) {
  return Promise.race([promise, new Promise(done => setTimeout(done, 5000))]);
}
function submitted(id) {
  const sink = document.querySelector("iframe");
  const loaded = new Promise(done => sink.addEventListener("load", done, {once: true}));
  const form = document.getElementById(id);
  form.action = urls[id];
  form.submit();
  return settle(loaded);
}
async function attack() {
  await settle(new Promise(done => { const i = new Image(); i.onload = i.onerror = done; i.src = urls["get"]; }));
  await submitted("form-text");
  await submitted("form-urlencoded");
  await settle(fetch(urls["fetch-no-cors"], {method: "POST", mode: "no-cors", credentials: "include",
                                              body: JSON.stringify({query: "{ version }"})}).catch(() => null));
  await settle(fetch(urls["delete"], {method: "POST", mode: "no-cors", credentials: "include"}).catch(() => null));
  said.websocket = await settle(new Promise(done => {
    const socket = new WebSocket(urls["websocket"], "graphql-ws");
    socket.onopen = () => socket.send(JSON.stringify({type: "connection_init", payload: {}}));
    socket.onmessage = event => done("answered: " + event.data);
    socket.onerror = () => done("refused");
    socket.onclose = () => done("refused");
  })) || "no answer";
  window.said = said;
}
attack();
</script></body></html>"""


def launch_mutation(tag: str, location: str) -> str:
    """A launch of the rollback job of the code location `location` (with a configuration it refuses, so that nothing
    would be written) tagged `tag`."""
    config = '{ops: {roll_back_days: {config: {start: "2025-01-01", end: "2025-01-01"}}}}'
    return (
        'mutation { launchRun(executionParams: {selector: {repositoryLocationName: "' + location + '", '
        f'repositoryName: "__repository__", jobName: "{ROLLBACK_JOB}"}}, runConfigData: {config}, '
        f'executionMetadata: {{tags: [{{key: "attack", value: "{tag}"}}]}}}}) {{ __typename }} }}'
    )


@contextmanager
def page_of_another_origin(base: str, victim_run: str, folder: Path, location: str):
    """The attacker's page, served on a port of its own, over TLS (a certificate of its own, made in `folder`) when the
    UI at `base` is: its address. Its requests ask for launches of `location`'s rollback job and the deletion of run
    `victim_run`."""
    urls = {a: f"{base}/graphql?query={urllib.parse.quote(launch_mutation(a, location))}" for a in ATTACKS}
    delete = 'mutation { deleteRun(runId: "RUN") { __typename } }'.replace("RUN", victim_run)
    urls["delete"] = f"{base}/graphql?query={urllib.parse.quote(delete)}"
    urls["websocket"] = base.replace("https://", "wss://").replace("http://", "ws://") + "/graphql"
    page = ATTACK_PAGE.replace("URLS", json.dumps(urls)).encode()

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    scheme = "https" if base.startswith("https") else "http"
    if scheme == "https":
        key, certificate = folder / "attacker.key", folder / "attacker.crt"
        made = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        subprocess.run([*made, "-keyout", str(key), "-out", str(certificate)], capture_output=True, check=True)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(certificate, key)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
