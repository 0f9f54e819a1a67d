"""File actions confined to a root folder (``[stdlib.fs]`` in mail.toml)."""

from mail.stdlib.fs.actions import (
    create_directory,
    delete_file,
    read_directory,
    read_file,
    write_file,
)

__all__ = ["create_directory", "delete_file", "read_directory", "read_file", "write_file"]
