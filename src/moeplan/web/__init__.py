"""``moeplan serve``: a local web page for checking, estimating and planning, on the same library calls
as the CLI (:mod:`moeplan.api`), offline: the page and its scripts are packaged files, nothing is
fetched from elsewhere, and the server listens on 127.0.0.1 unless told otherwise.

- :mod:`moeplan.web.requests` — what a request may say and how it becomes the CLI's arguments;
- :mod:`moeplan.web.guard` — host, content-type and body-size checks before the application;
- :mod:`moeplan.web.routes` — the FastAPI application: the page and the JSON API;
- :mod:`moeplan.web.jobs` — its computations, at most ``workers`` at once, interrupted past their time;
- :mod:`moeplan.web.server` — uvicorn in the foreground or in a background thread.
"""

from moeplan.web.routes import create_app
from moeplan.web.server import serve, serve_in_thread

__all__ = ["create_app", "serve", "serve_in_thread"]
