"""engine.atomic_io: atomic replacement of regular files, streaming to devices and FIFOs, pointers, digests."""

import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from engine import atomic_io
from engine.errors import InputError, PersistenceError

ROOT = Path(__file__).resolve().parents[2]


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if atomic_io.is_temp_name(p.name)]


def test_regular_file_is_replaced_atomically(tmp_path):
    target = tmp_path / "out.csv"
    atomic_io.write_text(target, "old\n")
    inode = target.stat().st_ino
    with atomic_io.atomic_writer(target, "w") as fh:
        fh.write("new ")
        assert target.read_text() == "old\n"  # readers see the old file until the commit
        assert len(_temps(tmp_path)) == 1
        fh.write("content\n")
    assert target.read_text() == "new content\n"
    assert target.stat().st_ino != inode  # a new file renamed over the old one
    assert _temps(tmp_path) == []


def test_new_file_gets_the_mode_open_would_give(tmp_path):
    mask = os.umask(0o022)
    try:
        atomic_io.write_bytes(tmp_path / "a", b"x")
        assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o644  # not mkstemp's 0600
        os.chmod(tmp_path / "a", 0o600)
        atomic_io.write_bytes(tmp_path / "a", b"y")
        assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o600  # an existing file keeps its mode
    finally:
        os.umask(mask)


def test_exception_inside_the_writer_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "state.json"
    atomic_io.write_text(target, '{"round": 3}')
    with pytest.raises(RuntimeError, match="writer failed"):
        with atomic_io.atomic_writer(target, "w") as fh:
            fh.write('{"round": 4, "trunc')
            raise RuntimeError("writer failed")
    assert target.read_text() == '{"round": 3}'
    assert _temps(tmp_path) == []
    with pytest.raises(RuntimeError):  # a target that did not exist stays absent
        with atomic_io.atomic_writer(tmp_path / "fresh.bin") as fh:
            fh.write(b"half")
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_sigkill_mid_write_leaves_old_file(tmp_path):
    target = tmp_path / "trace.arrow"
    target.write_bytes(b"complete old trace")
    code = textwrap.dedent(f"""
        import os, signal
        from engine import atomic_io
        with atomic_io.atomic_writer({str(target)!r}) as fh:
            fh.write(b"partial new tr")
            fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -9
    assert target.read_bytes() == b"complete old trace"
    # the killed writer's temp file is the only leftover, and it is recognisable as one
    assert [p.name for p in tmp_path.iterdir() if p != target] == _temps(tmp_path)


def test_fifo_is_streamed_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomic_io.write_bytes(fifo, b"a,b\n1,2\n")
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert got == [b"a,b\n1,2\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO: never renamed over
    assert _temps(tmp_path) == []


def test_dev_null_is_streamed(tmp_path):
    before = os.stat("/dev/null")
    assert atomic_io.is_stream("/dev/null")
    atomic_io.write_text("/dev/null", "discarded")
    with atomic_io.atomic_writer("/dev/null") as fh:
        fh.write(b"x" * 1000)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev


def test_dev_stdout_redirected_to_a_regular_file_is_written_through_the_descriptor(tmp_path):
    out = tmp_path / "captured.txt"
    code = "from engine import atomic_io; print('first', flush=True); atomic_io.write_text('/dev/stdout', 'body\\n')"
    with open(out, "w") as fh:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=fh, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    # the shell's file keeps its inode and gets both writes (a rename would have detached it)
    assert out.read_text() == "first\nbody\n"
    assert _temps(tmp_path) == []


def test_store_export_to_dev_stdout_streams_the_csv(tmp_path):
    from engine.store import ExperienceStore

    st = ExperienceStore()
    st.add_paths([["Energy", "Oil supply", "OPEC spare capacity"], ["Tech", "Chips", "Export rules"]])
    st.save(tmp_path / "store")
    proc = subprocess.run([sys.executable, "-m", "engine", "store", "export", str(tmp_path / "store"), "/dev/stdout"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('"industry","factor","analysis_direction"')
    assert any("OPEC spare capacity" in line for line in lines)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_symlink_to_a_regular_file_keeps_the_link(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_io.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_folder_target_and_bad_mode_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        atomic_io.write_text(tmp_path, "x")
    with pytest.raises(InputError, match="mode must be 'wb' or 'w'"):
        with atomic_io.atomic_writer(tmp_path / "f", "a"):
            pass
    assert list(tmp_path.iterdir()) == []


def test_pointer_swap_and_publish_dir(tmp_path):
    assert atomic_io.read_pointer(tmp_path / "LATEST") is None
    staging = tmp_path / ".staging"
    staging.mkdir()
    (staging / "a.bin").write_bytes(b"1")
    atomic_io.fsync_tree(staging)
    atomic_io.publish_dir(staging, tmp_path / "ckpt-1")
    atomic_io.swap_pointer(tmp_path / "LATEST", "ckpt-1\n")
    atomic_io.swap_pointer(tmp_path / "LATEST", "ckpt-2\n")
    assert atomic_io.read_pointer(tmp_path / "LATEST") == "ckpt-2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "ckpt-1"]


def test_digests_catch_truncation_and_corruption(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"0123456789")
    files = atomic_io.file_digests(tmp_path, ["t.parquet"])
    assert files["t.parquet"]["bytes"] == 10 and len(files["t.parquet"]["sha256"]) == 64
    atomic_io.verify_digests(tmp_path, files)
    (tmp_path / "t.parquet").write_bytes(b"0123456780")
    with pytest.raises(PersistenceError, match="does not match its sha256"):
        atomic_io.verify_digests(tmp_path, files)
    (tmp_path / "t.parquet").write_bytes(b"01234")
    with pytest.raises(PersistenceError, match=r"table .*t.parquet has 5 bytes, the manifest says 10"):
        atomic_io.verify_digests(tmp_path, files, what="table")
    with pytest.raises(PersistenceError, match="malformed"):
        atomic_io.verify_digests(tmp_path, {"../etc/passwd": {"bytes": 1}})
    with pytest.raises(PersistenceError, match="is missing"):
        atomic_io.verify_digests(tmp_path, {"gone.parquet": {"bytes": 1, "sha256": ""}})
