"""The image's HEALTHCHECK: exit 0 when the server on this container answers GET /health.

The port comes from MAIL_HEALTHCHECK_PORT (default 8000). Proxies from the environment are
ignored: the check is about this container's own server.
"""

import os
import sys
import urllib.request

port = os.environ.get("MAIL_HEALTHCHECK_PORT", "8000")
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(f"http://127.0.0.1:{port}/health", timeout=4) as response:
        sys.exit(0 if response.status == 200 else 1)
except Exception as exc:  # any failure is an unhealthy answer
    print(f"unhealthy: {exc}", file=sys.stderr)
    sys.exit(1)
