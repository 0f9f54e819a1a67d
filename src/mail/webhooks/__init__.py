"""Push delivery of task events: signed webhooks and A2A push notifications, at least once."""
