"""The sandbox service's hot route (agentmath/sandbox/service/hotpath.py): the paths it takes
are exactly those Starlette's ``/v1/sessions/{session_id}/run`` route matches, with the same
session id."""

from __future__ import annotations

from starlette.routing import Route

from agentmath.sandbox.service.hotpath import session_of_run_path

PATHS = ("/v1/sessions/abc-_1/run", "/v1/sessions/%20x/run", "/v1/sessions//run",
         "/v1/sessions/a/b/run", "/v1/sessions/a/run/", "/v1/sessions/a", "/v1/sessions/run",
         "/run_code", "/v1/session/a/run", "/v1/sessions/a/runs", "/x/v1/sessions/a/run")


def test_run_path_matches_what_the_router_would() -> None:
    route = Route("/v1/sessions/{session_id}/run", lambda request: None, methods=["POST"])
    for path in PATHS:
        match = route.path_regex.match(path)
        expected = match.group("session_id") if match else None
        assert session_of_run_path(path) == expected, path
    assert session_of_run_path("/v1/sessions/abc-_1/run") == "abc-_1"
