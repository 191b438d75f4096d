"""The page at ``/``: one self-contained HTML file (inline CSS and JS, nothing fetched from elsewhere).

It is static, so it is served without the API key; the API calls it makes send the key the user types (kept in
the tab's sessionStorage). Its Content-Security-Policy allows only its own inline script (by hash) and calls to
this server, so even a result text that slipped into the DOM as HTML could not run a script or load an image.
"""

from __future__ import annotations

import base64
import functools
import re
from importlib import resources

from subspaces.fingerprint import sha256_hex


@functools.cache
def page() -> tuple[bytes, dict[str, str]]:
    """The page's bytes and the headers to send with it."""
    html = resources.files("subspaces.serve").joinpath("page.html").read_text(encoding="utf-8")
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    hashes = " ".join(f"'sha256-{base64.b64encode(bytes.fromhex(sha256_hex(s.encode()))).decode()}'" for s in scripts)
    policy = (
        f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }
    return html.encode("utf-8"), headers
