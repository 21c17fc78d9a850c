"""What the embedded UI answers (exact_backfills/ui_guard.py), request by request: its own pages and clients that are
not browsers; never another origin's mutation, however a page sends it. tests/test_ui.py shows the same in Chromium."""

import stat

import pytest

from exact_backfills.ui_guard import Asked, Credentials, own_origins, refusal, refused

OWN = own_origins(["127.0.0.1:3000", "localhost:3000"])
HOST = {"host": "127.0.0.1:3000"}
JSON = {"content-type": "application/json"}
MUTATION = "query=mutation%20%7B%20terminateRun(runId%3A%22x%22)%20%7B%20__typename%20%7D%20%7D"


def asked(method: str = "GET", path: str = "/", query: str = "", websocket: bool = False, **headers: str) -> Asked:
    return Asked(websocket, method, path, query, {**HOST, **{k.replace("_", "-"): v for k, v in headers.items()}})


@pytest.mark.parametrize(
    "request_",
    [
        asked(),  # the UI's pages and scripts
        asked("GET", "/_next/static/chunks/main.js", sec_fetch_site="same-origin"),
        asked("POST", "/graphql", origin="http://127.0.0.1:3000", sec_fetch_site="same-origin", **JSON),
        asked("POST", "/graphql", origin="http://localhost:3000", **{**JSON, "host": "localhost:3000"}),
        asked("GET", "/graphql", websocket=True, origin="http://127.0.0.1:3000"),  # the UI's live updates
        asked("POST", "/graphql", **JSON),  # a client that is not a browser: no Origin, no Sec-Fetch-Site
        asked("GET", "/graphql"),  # GraphiQL's page, no query in it
        asked("GET", "/", sec_fetch_site="cross-site"),  # a link from elsewhere opens the UI, reading only
    ],
)
def test_the_uis_own_pages_and_clients_that_are_not_browsers_are_answered(request_):
    assert refusal(request_, OWN) is None


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        (asked("GET", "/graphql", MUTATION), "the API takes a query only as a POST of JSON"),  # an <img>
        (
            asked("POST", "/graphql", content_type="text/plain"),
            "a POST of JSON only, not text/plain",
        ),  # a no-cors fetch
        (asked("POST", "/graphql", content_type="application/x-www-form-urlencoded"), "a POST of JSON only"),  # a form
        (asked("POST", "/graphql", origin="http://127.0.0.1:8000", **JSON), "another origin (http://127.0.0.1:8000)"),
        (asked("POST", "/graphql", sec_fetch_site="same-site", **JSON), "another site (Sec-Fetch-Site: same-site)"),
        (
            asked("GET", "/graphql", websocket=True, origin="http://evil.example"),
            "another origin (http://evil.example)",
        ),
        (asked("GET", "/", host="evil.example:3000"), "Host evil.example:3000 is not this UI's own"),  # rebinding
    ],
)
def test_a_request_of_another_origin_or_a_mutation_outside_a_post_of_json_is_refused_in_one_line(request_, said):
    why = refusal(request_, OWN)
    assert why is not None and said in why and "\n" not in why, why


def test_an_origin_of_its_own_named_for_the_ui_is_its_own_too():
    mine = own_origins(["127.0.0.1:3000"], ["https://dagster.example.org/"])
    request_ = asked("POST", "/graphql", origin="https://dagster.example.org", host="dagster.example.org", **JSON)
    assert refusal(request_, mine) is None


def test_without_the_uis_password_nothing_answers_and_with_it_the_same_origin_rules_hold(tmp_path):
    credentials, made = Credentials.kept_in(tmp_path / "ui-credentials")
    assert made and stat.S_IMODE((tmp_path / "ui-credentials").stat().st_mode) == 0o600
    assert Credentials.kept_in(tmp_path / "ui-credentials") == (credentials, False)  # kept, not made again
    wrong = Credentials(credentials.user, "guessed").header
    for given in ({}, {"authorization": wrong}):
        found = refused(asked(**given), OWN, credentials)
        assert found is not None and found.status == 401 and "password" in found.why, found
    assert refused(asked(authorization=credentials.header), OWN, credentials) is None
    cross = asked("GET", "/graphql", MUTATION, authorization=credentials.header)
    found = refused(cross, OWN, credentials)
    assert found is not None and found.status == 403, found
