"""Subcommands of the `mail` CLI; each module has add_arguments(parser) and run(args) -> int."""
