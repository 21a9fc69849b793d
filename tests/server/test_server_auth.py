"""Authentication and XSRF: the API refuses callers without credentials, and a
cookie-authenticated POST without the XSRF token (what a hostile page could send)."""

from __future__ import annotations

import json
from http.cookies import SimpleCookie
from typing import Any

import pytest
from helpers_server import put_task, register_owner
from jupyter_server.utils import url_path_join
from tornado.httpclient import HTTPClientError

from chongming_nb.core.states import TaskStatus
from chongming_nb.stores import SqliteStore


@pytest.fixture
def one_task(kernel_store: SqliteStore) -> str:
    put_task(kernel_store, "t1", TaskStatus.RUNNING, owner=register_owner(kernel_store, "k1"))
    return "t1"


def api(base: str, *parts: str) -> str:
    return url_path_join(base, "chongming", "api", *parts)


@pytest.mark.parametrize("path", [("tasks",), ("tasks", "t1"), ("feed",), ("owners",)])
async def test_get_without_token_is_refused(http_server_client, jp_base_url, one_task, path):
    with pytest.raises(HTTPClientError) as info:
        await http_server_client.fetch(api(jp_base_url, *path))
    assert info.value.code == 403


async def test_post_without_token_is_refused(
    http_server_client, jp_base_url, kernel_store, one_task
):
    with pytest.raises(HTTPClientError) as info:
        await http_server_client.fetch(
            api(jp_base_url, "tasks", "t1", "commands"), method="POST", body='{"verb":"stop"}'
        )
    assert info.value.code == 403
    assert kernel_store.commands() == []


async def test_wrong_token_is_refused(http_server_client, jp_base_url, one_task):
    with pytest.raises(HTTPClientError) as info:
        await http_server_client.fetch(
            api(jp_base_url, "tasks"), headers={"Authorization": "token not-the-token"}
        )
    assert info.value.code == 403


async def _login_cookies(http_server_client: Any, jp_serverapp: Any, jp_base_url: str) -> str:
    """Log in like a browser (token in the URL) and return the Cookie header value."""
    token = jp_serverapp.identity_provider.token
    r = await http_server_client.fetch(
        url_path_join(jp_base_url, "api", "status") + f"?token={token}",
        follow_redirects=False,
        raise_error=False,
    )
    jar: SimpleCookie = SimpleCookie()
    for header in r.headers.get_list("Set-Cookie"):
        jar.load(header)
    assert jar, "logging in with the token set no cookie"
    return "; ".join(f"{k}={m.value}" for k, m in jar.items())


async def test_cookie_post_needs_the_xsrf_token(
    http_server_client, jp_serverapp, jp_base_url, kernel_store, one_task
):
    cookies = await _login_cookies(http_server_client, jp_serverapp, jp_base_url)
    url = api(jp_base_url, "tasks", "t1", "commands")
    # the cookie alone authenticates a GET ...
    r = await http_server_client.fetch(api(jp_base_url, "tasks"), headers={"Cookie": cookies})
    assert r.code == 200
    # ... but a POST without the XSRF token is refused and queues nothing
    with pytest.raises(HTTPClientError) as info:
        await http_server_client.fetch(
            url, method="POST", body='{"verb":"stop"}', headers={"Cookie": cookies}
        )
    assert info.value.code == 403
    assert kernel_store.commands() == []
    # with the token in the header and the matching _xsrf cookie it is accepted
    xsrf = "2|deadbeef|0123456789abcdef0123456789abcdef|1700000000"
    r = await http_server_client.fetch(
        url,
        method="POST",
        body='{"verb":"stop"}',
        headers={"Cookie": f"{cookies}; _xsrf={xsrf}", "X-XSRFToken": xsrf},
        raise_error=False,
    )
    assert r.code == 202, r.body
    assert len(kernel_store.commands()) == 1
    assert json.loads(r.body)["verb"] == "stop"
