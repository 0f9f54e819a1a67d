"""mail.stdlib.fs inside a temporary root: results, confinement and size caps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mail.config import clear_config_cache
from mail.stdlib.fs import create_directory, delete_file, read_directory, read_file, write_file


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("MAIL_STDLIB_FS_ROOT", str(root))
    return root


async def test_write_read_list_delete(root: Path) -> None:
    target = root / "subdir" / "note.txt"
    assert (
        await write_file.function({"path": str(target), "content": "hello"})
        == f"successfully wrote to {target}"
    )
    assert target.read_text() == "hello"
    assert await read_file.function({"path": "subdir/note.txt"}) == "hello"
    assert await read_file.function({"path": str(target)}) == "hello"
    assert await delete_file.function({"path": "subdir/note.txt"}) == (
        "successfully deleted subdir/note.txt"
    )
    assert not target.exists()


async def test_directories(root: Path) -> None:
    assert (
        await create_directory.function({"path": "d/e"}) == "successfully created directory at d/e"
    )
    for name in ("b.txt", "a.txt", ".hidden"):
        (root / "d" / "e" / name).write_text("x")
    assert (await read_directory.function({"path": "d/e"})).split("\n") == [
        ".hidden",
        "a.txt",
        "b.txt",
    ]
    assert await create_directory.function({"path": "d/e"}) == (
        "Error: directory already exists at d/e"
    )
    assert await create_directory.function({"path": "d/e/a.txt"}) == (
        "Error: d/e/a.txt is a file, not a directory"
    )
    assert await read_directory.function({"path": "d/e/a.txt"}) == (
        "Error: d/e/a.txt is not a directory"
    )
    assert await read_directory.function({"path": "nope"}) == "Error: directory not found at nope"
    assert await create_directory.function({"path": "empty"}) == (
        "successfully created directory at empty"
    )
    assert await read_directory.function({"path": "empty"}) == ""


async def test_result_errors(root: Path) -> None:
    (root / "dir").mkdir()
    assert (
        await read_file.function({"path": "missing.txt"}) == "Error: file not found at missing.txt"
    )
    assert await read_file.function({"path": "dir"}) == "Error: dir is not a file"
    assert await write_file.function({"path": "dir", "content": "x"}) == "Error: dir is not a file"
    assert await delete_file.function({"path": "dir"}) == "Error: dir is not a file"
    assert await delete_file.function({"path": "gone"}) == "Error: file not found at gone"
    (root / "bin").write_bytes(b"\xff\xfe\x00")
    assert await read_file.function({"path": "bin"}) == "Error: bin is not a UTF-8 text file"


@pytest.mark.parametrize("action", [read_file, delete_file, create_directory, read_directory])
async def test_missing_or_wrong_path_type(root: Path, action) -> None:  # type: ignore[no-untyped-def]
    # create_directory raised KeyError on a missing path in the original.
    assert await action.function({}) == "Error: `path` must be a string"
    assert await action.function({"path": 3}) == "Error: `path` must be a string"


@pytest.mark.parametrize("action", [read_file, delete_file, create_directory])
async def test_an_empty_path_is_refused(root: Path, action) -> None:  # type: ignore[no-untyped-def]
    assert await action.function({"path": ""}) == "Error: `path` is empty"
    assert await write_file.function({"path": "", "content": "x"}) == "Error: `path` is empty"
    # read_directory lists the caller's folder, as "." does.
    (root / "a.txt").write_text("x")
    assert await read_directory.function({"path": ""}) == "a.txt"


async def test_content_that_is_not_utf8_text_is_refused(root: Path) -> None:
    # A lone surrogate (what a JSON "\udcff" escape decodes to) has no UTF-8 form.
    assert await write_file.function({"path": "bin", "content": "\udcff"}) == (
        "Error: `content` cannot be written as UTF-8: it holds an unpaired surrogate"
    )
    assert not (root / "bin").exists()


async def test_write_needs_string_content(root: Path) -> None:
    assert write_file.parameters["required"] == ["path", "content"]
    assert await write_file.function({"path": "a", "content": 123}) == (
        "Error: `content` must be a string"
    )
    assert await write_file.function({"path": "a", "content": ""}) == "successfully wrote to a"


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/etc/hostname"])
async def test_paths_outside_the_root_are_refused(root: Path, path: str) -> None:
    (root / "a").mkdir()
    outside = root.parent / "outside.txt"
    outside.write_text("secret")
    for action, args in (
        (read_file, {"path": path}),
        (write_file, {"path": path, "content": "pwned"}),
        (delete_file, {"path": path}),
        (create_directory, {"path": path + ".d"}),
        (read_directory, {"path": path}),
    ):
        out = await action.function(args)
        assert out == f"Error: {args['path']} is outside the file root ([stdlib.fs] root)", out
    assert outside.read_text() == "secret"


async def test_absolute_path_outside_is_refused_even_if_it_exists(
    root: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.txt"
    other.write_text("secret")
    assert (await read_file.function({"path": str(other)})).endswith(
        "is outside the file root ([stdlib.fs] root)"
    )


async def test_symlinks_out_of_the_root_are_refused(root: Path, tmp_path: Path) -> None:
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    (outside_dir / "secret.txt").write_text("secret")
    os.symlink(outside_dir, root / "link_dir")
    os.symlink(outside_dir / "secret.txt", root / "link_file")
    refused = "symbolic link; links are not followed"
    assert refused in await read_file.function({"path": "link_file"})
    assert refused in await read_file.function({"path": "link_dir/secret.txt"})
    assert refused in await write_file.function({"path": "link_dir/new.txt", "content": "x"})
    assert refused in await write_file.function({"path": "link_file", "content": "x"})
    assert refused in await read_directory.function({"path": "link_dir"})
    assert refused in await delete_file.function({"path": "link_dir/secret.txt"})
    assert not (outside_dir / "new.txt").exists()
    assert (outside_dir / "secret.txt").read_text() == "secret"
    # Deleting the link itself (it lives in the root) is allowed and leaves the target alone.
    assert await delete_file.function({"path": "link_file"}) == "successfully deleted link_file"
    assert not (root / "link_file").is_symlink()
    assert (outside_dir / "secret.txt").read_text() == "secret"


async def test_symlink_inside_the_root_is_not_followed_either(root: Path) -> None:
    # A link is refused wherever it points: the check and the use are one open (O_NOFOLLOW),
    # so a link swapped in after any check cannot redirect a read or a write.
    (root / "real.txt").write_text("inside")
    os.symlink(root / "real.txt", root / "alias.txt")
    (root / "d").mkdir()
    os.symlink(root / "d", root / "alias_dir")
    for result in (
        await read_file.function({"path": "alias.txt"}),
        await write_file.function({"path": "alias.txt", "content": "x"}),
        await write_file.function({"path": "alias_dir/new.txt", "content": "x"}),
        await read_directory.function({"path": "alias_dir"}),
    ):
        assert result.startswith("Error: ") and "links are not followed" in result, result
    assert (root / "real.txt").read_text() == "inside"
    assert not (root / "d" / "new.txt").exists()


async def test_each_instance_has_its_own_folder(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mail.core.instance_context import acting_for

    with acting_for("user", "alice"):
        assert await write_file.function({"path": "a.txt", "content": "A"}) == (
            "successfully wrote to a.txt"
        )
        assert await read_directory.function({"path": "."}) == "a.txt"
    with acting_for("user", "bob"):
        assert await read_file.function({"path": "a.txt"}) == "Error: file not found at a.txt"
        assert await read_file.function({"path": "../user-alice/a.txt"}) == (
            "Error: ../user-alice/a.txt is outside the file root ([stdlib.fs] root)"
        )
        assert await read_directory.function({"path": "."}) == ""
    with acting_for("user", "../evil"):
        await write_file.function({"path": "e.txt", "content": "E"})
    assert (root / "user-alice" / "a.txt").read_text() == "A"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("user-h")) != []
    monkeypatch.setenv("MAIL_STDLIB_FS_SHARED", "true")
    with acting_for("user", "bob"):
        assert await read_file.function({"path": "user-alice/a.txt"}) == "A"


async def test_size_caps(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAIL_STDLIB_FS_MAX_READ_BYTES", "10")
    monkeypatch.setenv("MAIL_STDLIB_FS_MAX_WRITE_BYTES", "8")
    (root / "big.txt").write_text("x" * 11)
    assert await read_file.function({"path": "big.txt"}) == (
        "Error: big.txt is 11 bytes, over the read limit of 10 bytes ([stdlib.fs] max_read_bytes)"
    )
    assert await write_file.function({"path": "w.txt", "content": "é" * 5}) == (
        "Error: content is 10 bytes, over the write limit of 8 bytes ([stdlib.fs] max_write_bytes)"
    )
    assert not (root / "w.txt").exists()
    assert await write_file.function({"path": "w.txt", "content": "12345678"}) == (
        "successfully wrote to w.txt"
    )


async def test_default_root_is_a_per_server_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAIL_STDLIB_FS_ROOT", raising=False)
    monkeypatch.delenv("SWARM_NAME", raising=False)
    (tmp_path / "mail.toml").write_text('[server.swarm]\nname = "alpha"\n')
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(tmp_path / "mail.toml"))
    monkeypatch.chdir(tmp_path)
    clear_config_cache()
    try:
        assert await write_file.function({"path": "x.txt", "content": "1"}) == (
            "successfully wrote to x.txt"
        )
        assert (tmp_path / "mail_files" / "alpha" / "x.txt").read_text() == "1"
        assert "outside the file root" in await read_file.function({"path": "../../mail.toml"})
        # `mail server --swarm-name beta` exports SWARM_NAME, which names the folder.
        monkeypatch.setenv("SWARM_NAME", "beta")
        await write_file.function({"path": "y.txt", "content": "2"})
        assert (tmp_path / "mail_files" / "beta" / "y.txt").read_text() == "2"
    finally:
        clear_config_cache()


async def test_root_from_mail_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAIL_STDLIB_FS_ROOT", raising=False)
    files = tmp_path / "files"
    (tmp_path / "mail.toml").write_text(f'[stdlib.fs]\nroot = "{files}"\n')
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(tmp_path / "mail.toml"))
    clear_config_cache()
    try:
        await write_file.function({"path": "n.txt", "content": "ok"})
        assert (files / "n.txt").read_text() == "ok"
    finally:
        clear_config_cache()


def test_a_link_swapped_in_after_the_check_is_refused_at_use(tmp_path: Path) -> None:
    # The check (lstat: nothing there) and the use (open) are separate calls; a link planted
    # in between is refused by the open itself (O_NOFOLLOW), so nothing is written through it.
    from mail.utils.safe_files import LinkRefused, lstat_entry, parent_dir, write_regular

    root = tmp_path / "root"
    (root / "inbox").mkdir(parents=True)
    target = tmp_path / "outside.txt"
    target.write_text("untouched")
    with parent_dir(root, ["inbox", "report.txt"]) as folder:
        assert lstat_entry(folder, "report.txt") is None
        os.symlink(target, root / "inbox" / "report.txt")
        with pytest.raises(LinkRefused):
            write_regular(folder, "report.txt", "inbox/report.txt", b"payload")
    assert target.read_text() == "untouched"
    # A folder on the way swapped for a link is refused the same way.
    (root / "inbox" / "report.txt").unlink()
    (root / "inbox").rename(root / "moved")
    os.symlink(tmp_path, root / "inbox")
    with pytest.raises(LinkRefused), parent_dir(root, ["inbox", "outside.txt"]):
        pass
