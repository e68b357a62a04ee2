"""Files replaced whole (autotune/core/atomic.py): the old file or the new one, never half of one, and no temporary
file left behind."""
import os
import stat

import pytest

from autotune.core import atomic


def test_a_write_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    atomic.write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    atomic.write_text_atomic(path, "text\n")
    assert path.read_text() == "text\n"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


MID_WRITE = """
import resource, signal, sys
from autotune.core.atomic import write_bytes_atomic

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    write_bytes_atomic(sys.argv[1], b"n" * (1 << 20), durable=True)
except OSError as exc:
    print(exc.errno)
"""


def test_a_failure_mid_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    """A write that fails part way (here the file-size limit, as a full disk would: the first 4 KiB are written,
    the rest refused): the old file is as it was, and the part-written temporary file is gone."""
    import errno
    import subprocess
    import sys

    path = tmp_path / "code.code"
    path.write_bytes(b"old")
    out = subprocess.run([sys.executable, "-c", MID_WRITE, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(errno.EFBIG), out.stderr
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["code.code"]


def test_an_error_while_encoding_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "memo.txt"
    path.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        atomic.write_text_atomic(path, "new" + "x" * 100_000 + "\N{SNOWMAN}", encoding="ascii")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["memo.txt"]


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_failure_at_fsync_or_rename_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch, step):
    path = tmp_path / "gpu.yaml"
    path.write_bytes(b"old")

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, step, refuse)
    with pytest.raises(OSError, match="No space"):
        atomic.write_bytes_atomic(path, b"new", durable=True)
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["gpu.yaml"]


def test_an_interrupt_mid_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "cache.pickle"

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_bytes_atomic(path, b"data", durable=True)
    assert list(tmp_path.iterdir()) == []


def test_durable_writes_fsync_and_others_do_not(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    atomic.write_bytes_atomic(tmp_path / "cache", b"x")
    assert synced == []
    atomic.write_text_atomic(tmp_path / "db.yaml", "x", durable=True)
    assert len(synced) == 1


def test_the_mode_is_kept_only_where_asked(tmp_path):
    """``keep_mode``: the old file's mode, a new file the mode ``open`` gives; otherwise the private 0600 of the
    temporary file (cache files)."""
    shared = tmp_path / "shared.yaml"
    shared.write_text("old")
    shared.chmod(0o640)
    atomic.write_text_atomic(shared, "new", keep_mode=True)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        atomic.write_text_atomic(tmp_path / "fresh.yaml", "new", keep_mode=True)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.yaml").stat().st_mode) == 0o644
    atomic.write_bytes_atomic(tmp_path / "private.code", b"new")
    assert stat.S_IMODE((tmp_path / "private.code").stat().st_mode) == 0o600


def test_parents_makes_the_missing_folders_and_otherwise_a_missing_folder_is_an_error(tmp_path):
    deep = tmp_path / "a" / "b" / "c.code"
    with pytest.raises(FileNotFoundError):
        atomic.write_bytes_atomic(deep, b"x")
    atomic.write_bytes_atomic(deep, b"x", parents=True)
    assert deep.read_bytes() == b"x"


def test_a_name_as_long_as_a_folder_takes_still_gets_a_temporary_file(tmp_path):
    path = tmp_path / ("k" * 250)
    atomic.write_bytes_atomic(path, b"x")
    assert path.read_bytes() == b"x" and len(list(tmp_path.iterdir())) == 1
