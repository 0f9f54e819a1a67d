"""The `email-review` example: an assistant whose emails a person reviews before they go out."""
