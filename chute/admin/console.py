"""The web console: one page the broker serves at ``/`` on its HTTP port.

The page is plain HTML, CSS and JavaScript shipped in the package directory
``chute/admin/console/`` (no build step, nothing fetched from elsewhere): it
draws everything from the JSON admin API under ``/api/`` in the browser, so
this module only serves the files. It knows them by name (a request cannot
name any other file) and reads them once, when the routes are added.

Every answer carries headers that keep the page to itself: a
Content-Security-Policy allowing only the broker's own origin (no inline
script, no framing), ``nosniff``, and no referrer. The page needs no login;
the API it calls asks for HTTP Basic credentials when the broker has users,
and the browser prompts for them.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from aiohttp import web

ASSETS: Final = {
    "index.html": "text/html",
    "console.css": "text/css",
    "console.js": "text/javascript",
    "lib.js": "text/javascript",
    "moves.js": "text/javascript",
    "streams.js": "text/javascript",
    "brokerstate.js": "text/javascript",
    "connections.js": "text/javascript",
    "cluster.js": "text/javascript",
    "destinations.js": "text/javascript",
    "publish.js": "text/javascript",
    "page.js": "text/javascript",
    "poll.js": "text/javascript",
    "destination.js": "text/javascript",
    "messages.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
"""The console's files (in ``chute/admin/console/``) and their content types."""

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def add_console_routes(app: web.Application) -> None:
    """Serve the console on ``app``: ``/`` (the page) and ``/console/{file}`` (its assets).

    Raises:
        FileNotFoundError: a console file is missing from the installed package.
    """
    folder = resources.files("chute.admin").joinpath("console")
    files = {name: folder.joinpath(name).read_bytes() for name in ASSETS}

    def answer(name: str) -> web.Response:
        return web.Response(
            body=files[name],
            content_type=ASSETS[name],
            charset="utf-8" if ASSETS[name].startswith("text/") else None,
            headers=SECURITY_HEADERS,
        )

    async def index(request: web.Request) -> web.Response:
        return answer("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["file"]
        if name not in files:
            raise web.HTTPNotFound(
                text=f"the console has no file {name!r}: open the console at /\n",
                headers=SECURITY_HEADERS,
            )
        return answer(name)

    app.router.add_get("/", index)
    app.router.add_get("/console/{file}", asset)
