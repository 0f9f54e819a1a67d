"""Push delivery of task events: signed webhooks and A2A push notifications, at least once.

- ``events``: which task events become which webhook events, and their payloads (pure);
- ``outbox``: the rows an instance's store writes with the event that causes them;
- ``signing``: secrets and Standard Webhooks signatures (the ``standardwebhooks`` library);
- ``policy``: the retry schedule, what an answer means, ``Retry-After``;
- ``transport``: the guarded HTTP client (no private targets, no redirects, bounded reads);
- ``engine``: fan-out, claims, attempts, retries, disabling, retention;
- ``views``: what callers see of subscriptions and deliveries (a page's cursor too), and
  ``WebhookError``, a refusal with its HTTP status;
- ``service``: subscriptions as the routes, the REPL and the A2A bridge see them.

See docs/webhooks.md. This layer sits below ``mail.server`` (which installs it) and above
``mail.stdlib`` (whose address guard it uses).
"""
