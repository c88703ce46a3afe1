"""The model cache's guarantees (bindscope/loading/cache.py), on a stand-in conversion.

One converter at a time (two processes), nothing half-written after a kill, a damaged entry
rebuilt or refused with its folder named, an unusable ``BINDSCOPE_CACHE`` refused, files
created as the umask says. The conversion is a stand-in that writes two small files, so no
real model is converted twice here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from bindscope.errors import ModelLoadError
from bindscope.loading import cache
from bindscope.loading import embedded_models as emb
from tests.conftest import gguf_stand_in

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = save({"w": torch.ones(250)})  # a safetensors file: a header, then 1,000 bytes
NAME = "gemma-3-270m"
ENTRY = "stand-in-entry"

# A converter in its own process: its conversion logs its pid, writes a first file, then
# waits for the file GO before finishing (so the test decides when it ends).
WORKER = """
import os, sys, time
from pathlib import Path
from bindscope.loading import embedded_models as emb
import torch
from safetensors.torch import save_file
cache, log, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

def source(scratch):
    path = scratch / "stand-in.gguf"
    path.write_bytes(b"GGUF")
    return path

def convert(src, target):
    with log.open("a") as f:
        f.write(f"{os.getpid()}\\n")
    (target / "model.safetensors").write_bytes(b"half")
    while not go.exists():
        time.sleep(0.05)
    save_file({"w": torch.ones(250)}, target / "model.safetensors")
    (target / "config.json").write_text("{}")

emb._convert_gguf = convert
emb.EMBEDDED["gemma-3-270m"] = emb.Embedded("gemma-3-270m", "stand-in-entry", source, "base")
print(emb.embedded_folder("gemma-3-270m", cache))
"""


def _worker(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / f"{name}.err"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-c", WORKER, str(tmp_path / "cache"), str(tmp_path / "log")]
    process = subprocess.Popen(
        [*args, str(tmp_path / "go")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
    )
    return process, err


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _conversions(tmp_path: Path) -> list[str]:
    log = tmp_path / "log"
    return log.read_text().split() if log.exists() else []


@pytest.fixture
def stand_in(monkeypatch):
    """The same stand-in conversion in this process; counts its calls."""
    calls: list[Path] = []

    def convert(src: Path, target: Path) -> None:
        calls.append(target)
        (target / "model.safetensors").write_bytes(WEIGHTS)
        (target / "config.json").write_text("{}")

    monkeypatch.setitem(emb.EMBEDDED, NAME, emb.Embedded(NAME, ENTRY, gguf_stand_in, "base"))
    monkeypatch.setattr(emb, "_convert_gguf", convert)
    return calls


def test_two_processes_convert_once_and_the_second_loads_the_finished_entry(tmp_path):
    first, _ = _worker(tmp_path, "first")
    _wait_for(lambda: len(_conversions(tmp_path)) == 1, "the first conversion to start")
    second, second_err = _worker(tmp_path, "second")
    _wait_for(lambda: "another process is converting" in second_err.read_text(), "a wait")
    assert str(tmp_path / "cache" / ENTRY) in second_err.read_text()  # names what it waits on
    (tmp_path / "go").touch()
    outputs = [p.communicate(timeout=120)[0].strip() for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0]
    assert outputs == [str(tmp_path / "cache" / ENTRY)] * 2
    assert _conversions(tmp_path) == [str(first.pid)]  # the second converted nothing
    assert cache.damage(tmp_path / "cache" / ENTRY) is None
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f".{ENTRY}.lock", ENTRY]


def test_a_converter_killed_midway_leaves_no_entry_and_the_next_one_cleans_up(tmp_path, stand_in):
    killed, _ = _worker(tmp_path, "killed")
    _wait_for(lambda: len(_conversions(tmp_path)) == 1, "the conversion to start")
    killed.kill()
    killed.wait(timeout=60)
    folder = tmp_path / "cache" / ENTRY
    staging = tmp_path / "cache" / f".convert-{ENTRY}-{killed.pid}"
    assert (staging / "model.safetensors").read_bytes() == b"half"  # what the kill cut short
    assert not folder.exists() and cache.damage(folder) == "not converted yet"
    assert emb.embedded_folder(NAME, tmp_path / "cache") == folder
    assert stand_in == [tmp_path / "cache" / f".convert-{ENTRY}-{os.getpid()}"]
    assert not staging.exists()  # the dead converter's staging folder is gone
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f".{ENTRY}.lock", ENTRY]


def test_staging_folders_of_earlier_versions_are_removed_once_an_hour_old(tmp_path, stand_in):
    stale, recent = tmp_path / ".convert-ab_d1234", tmp_path / ".convert-wxyz9876"
    for path in (stale, recent):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"half")
    hour_ago = time.time() - 3601
    os.utime(stale, (hour_ago, hour_ago))
    emb.embedded_folder(NAME, tmp_path)
    assert not stale.exists() and recent.exists()  # recent: an older converter may still run


def _manifest(folder: Path) -> dict:
    return json.loads((folder / cache.MANIFEST).read_text())


EDITED = WEIGHTS[:-1] + b"\x00"  # the last float's top byte: same size, same header
OTHER_HEADER = WEIGHTS.replace(b'"w"', b'"v"')  # a tensor renamed: same size


def _edit_later(path: Path, data: bytes) -> None:
    """Rewrite ``path`` as an edit a second after the conversion would (file timestamps are
    coarser than the milliseconds between the two writes here)."""
    mtime = path.stat().st_mtime_ns
    path.write_bytes(data)
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda f: (f / "model.safetensors").write_bytes(WEIGHTS[:-1]), "truncated"),
        (lambda f: _edit_later(f / "model.safetensors", EDITED), "sha256 changed"),
        (lambda f: _edit_later(f / "model.safetensors", OTHER_HEADER), "header"),
        (lambda f: _edit_later(f / "config.json", b"[]"), "config.json differs"),
        (lambda f: (f / "config.json").unlink(), "config.json is missing"),
        (lambda f: (f / cache.MANIFEST).unlink(), "earlier bindscope"),
        (lambda f: (f / "extra.safetensors").write_bytes(b""), "added after the conversion"),
    ],
    ids=[
        "truncated",
        "same-size-edit",
        "header-edit",
        "config-edit",
        "missing",
        "no-manifest",
        "added",
    ],
)
def test_a_damaged_entry_is_found_and_rebuilt_with_the_folder_named(
    tmp_path, stand_in, capsys, damage, reason
):
    folder = emb.embedded_folder(NAME, tmp_path)
    assert cache.damage(folder) is None
    damage(folder)
    assert reason in cache.damage(folder)
    capsys.readouterr()
    assert emb.embedded_folder(NAME, tmp_path) == folder
    err = capsys.readouterr().err
    assert f"{folder} cannot be used" in err and reason in err and "converting" in err
    assert len(stand_in) == 2 and cache.damage(folder) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{ENTRY}.lock", ENTRY]


def test_an_edit_with_its_mtime_put_back_is_found_by_the_full_check_only(tmp_path, stand_in):
    folder = emb.embedded_folder(NAME, tmp_path)
    weights = folder / "model.safetensors"
    before = weights.stat()
    weights.write_bytes(EDITED)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cache.damage(folder) is None  # the quick check's stated blind spot
    assert "sha256 changed" in cache.damage(folder, full=True)
    assert emb.embedded_folder(NAME, tmp_path, full=True) == folder
    assert len(stand_in) == 2 and weights.read_bytes() == WEIGHTS


def test_a_copy_with_new_mtimes_is_hashed_once_then_checked_quickly(
    tmp_path, stand_in, monkeypatch
):
    folder = emb.embedded_folder(NAME, tmp_path)
    weights = folder / "model.safetensors"
    moved = weights.stat().st_mtime_ns + 10**9
    os.utime(weights, ns=(moved, moved))  # as cp without -p leaves it
    hashed: list[str] = []
    real = cache.file_sha256
    monkeypatch.setattr(cache, "file_sha256", lambda p: hashed.append(p.name) or real(p))
    assert cache.damage(folder) is None and "model.safetensors" in hashed
    assert _manifest(folder)["files"]["model.safetensors"]["mtime_ns"] == moved
    hashed.clear()
    assert cache.damage(folder) is None and hashed == ["config.json"]  # the weights: not read
    assert sorted(p.name for p in folder.iterdir()) == sorted([cache.MANIFEST, *_files(folder)])


def _files(folder: Path) -> list[str]:
    return list(_manifest(folder)["files"])


def test_an_unreadable_file_is_damage_not_a_traceback(tmp_path, stand_in, monkeypatch):
    folder = emb.embedded_folder(NAME, tmp_path)

    def unreadable(path: Path) -> str:  # as a 0600 file of another user reads (root reads all)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(cache, "_header_sha256", unreadable)
    reason = cache.damage(folder)
    assert reason.startswith("a file cannot be read") and "model.safetensors" in reason


def test_a_damaged_entry_that_cannot_be_rebuilt_is_refused_with_how_to_clear_it(
    tmp_path, stand_in, monkeypatch
):
    folder = emb.embedded_folder(NAME, tmp_path)
    (folder / "model.safetensors").write_bytes(WEIGHTS[:10])
    packaged = emb.Embedded(NAME, ENTRY, emb.gemma3_gguf, "base", ("no-such-package",), "pip x")
    monkeypatch.setitem(emb.EMBEDDED, NAME, packaged)
    with pytest.raises(ModelLoadError) as err:
        emb.embedded_folder(NAME, tmp_path)
    message = str(err.value)
    assert f"{folder}: the cached {NAME} cannot be used (model.safetensors has 10 bytes" in message
    assert "not installed: no-such-package" in message and f"rm -rf {folder}" in message
    assert len(stand_in) == 1  # nothing converted


def test_the_manifest_records_every_file_and_the_weights_digest(tmp_path, stand_in):
    import hashlib

    folder = emb.embedded_folder(NAME, tmp_path)
    manifest = _manifest(folder)
    assert manifest["model"] == NAME and manifest["source"] == "stand-in.gguf"
    assert manifest["source_sha256"] == hashlib.sha256(b"GGUF").hexdigest()
    weights = hashlib.sha256(WEIGHTS).hexdigest()
    entry = manifest["files"]["model.safetensors"]
    assert (entry["size"], entry["sha256"]) == (len(WEIGHTS), weights)
    line = f"model.safetensors {weights}\n".encode()
    assert manifest["weights_sha256"] == hashlib.sha256(line).hexdigest()
    assert emb.weights_digest(NAME, tmp_path) == manifest["weights_sha256"]


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_the_cache_is_created_as_the_umask_says(tmp_path, stand_in, umask):
    old = os.umask(umask)
    try:
        folder = emb.embedded_folder(NAME, tmp_path / "cache")
    finally:
        os.umask(old)
    for path in [tmp_path / "cache", folder]:
        assert path.stat().st_mode & 0o777 == 0o777 & ~umask, path
    for path in [*folder.iterdir(), tmp_path / "cache" / f".{ENTRY}.lock"]:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


def test_a_cache_that_is_a_file_or_cannot_be_created_is_refused(tmp_path, stand_in, monkeypatch):
    afile = tmp_path / "file"
    afile.write_text("")
    monkeypatch.setenv("BINDSCOPE_CACHE", str(afile))
    for check in (lambda: emb.embedded_folder(NAME), lambda: emb.check_embedded(NAME)):
        with pytest.raises(ModelLoadError, match=rf"BINDSCOPE_CACHE={afile} is a file, not a"):
            check()
    monkeypatch.setenv("BINDSCOPE_CACHE", str(afile / "below"))
    with pytest.raises(ModelLoadError, match=rf"cannot be created: {afile} is a file"):
        emb.embedded_folder(NAME)
    with pytest.raises(ModelLoadError, match=rf"the cache folder {afile} \(cache=\) is a file"):
        emb.embedded_folder(NAME, afile)
    assert stand_in == [] and afile.read_text() == ""


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_a_read_only_cache_is_refused_before_converting(tmp_path, stand_in):
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(ModelLoadError, match="cannot be written to"):
            emb.embedded_folder(NAME, tmp_path / "cache")
    finally:
        tmp_path.chmod(0o755)


def test_the_command_line_exits_2_on_a_file_cache_and_writes_no_numbers(
    tmp_path, stand_in, monkeypatch, capsys
):
    from bindscope import cli

    afile = tmp_path / "file"
    afile.write_text("")
    monkeypatch.setenv("BINDSCOPE_CACHE", str(afile))
    out = tmp_path / "out"
    assert cli.main(["binding", "--model", NAME, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: BINDSCOPE_CACHE={afile} is a file" in err
    assert not list(out.rglob("*.jsonl")) and not list(out.rglob("summary.json"))


# Issue 40, silent 10: the manifest's weights_sha256 goes into every record; an edited value
# was never compared with the files, even by the full check.
def test_an_edited_weights_digest_is_found_and_the_entry_rebuilt(tmp_path, stand_in, capsys):
    folder = emb.embedded_folder(NAME, tmp_path)
    manifest = _manifest(folder)
    true_digest = manifest["weights_sha256"]
    forged = "0" * 64
    (folder / cache.MANIFEST).write_text(json.dumps({**manifest, "weights_sha256": forged}))
    for full in (False, True):
        reason = cache.damage(folder, full=full)
        assert f"weights_sha256 '{forged}' is not the digest" in reason and true_digest in reason
    capsys.readouterr()
    assert emb.embedded_folder(NAME, tmp_path, full=True) == folder
    assert "the manifest was edited); converting" in capsys.readouterr().err
    assert len(stand_in) == 2 and emb.weights_digest(NAME, tmp_path) == true_digest


def test_a_forged_manifest_that_agrees_with_itself_is_found_by_the_full_check(tmp_path, stand_in):
    folder = emb.embedded_folder(NAME, tmp_path)
    manifest = _manifest(folder)
    manifest["files"]["model.safetensors"]["sha256"] = "0" * 64
    manifest["weights_sha256"] = cache.weights_sha256(manifest["files"])
    (folder / cache.MANIFEST).write_text(json.dumps(manifest))
    assert cache.damage(folder) is None  # the quick check's stated blind spot: bytes unread
    assert "model.safetensors differs" in cache.damage(folder, full=True)


@pytest.fixture
def read_only(monkeypatch):
    """Folders that behave as on a read-only mount: every write under them fails with EROFS,
    unlinking a file that is not there too (as the kernel answers), and os.access says so."""
    import errno

    roots: list[Path] = []

    def refusing(real):
        def method(self, *args, **kwargs):
            if any(Path(self).is_relative_to(root) for root in roots):
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real(self, *args, **kwargs)

        return method

    for name in ("write_text", "write_bytes", "unlink", "replace", "rename", "mkdir", "touch"):
        monkeypatch.setattr(Path, name, refusing(getattr(Path, name)))
    real_access = os.access

    def access(path, mode, **kwargs):
        if mode & os.W_OK and any(Path(path).is_relative_to(root) for root in roots):
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return roots


def test_a_read_only_cache_whose_weights_moved_loads_when_the_hash_passes(
    tmp_path, stand_in, read_only
):
    folder = emb.embedded_folder(NAME, tmp_path)
    weights = folder / "model.safetensors"
    moved = weights.stat().st_mtime_ns + 10**9
    os.utime(weights, ns=(moved, moved))  # as a copy without -p, before the mount
    before = (folder / cache.MANIFEST).read_bytes()
    read_only.append(tmp_path)
    with pytest.raises(OSError, match="Read-only"):  # the stand-in mount holds
        (folder / ".probe").unlink(missing_ok=True)
    assert cache.damage(folder) is None
    assert emb.embedded_folder(NAME, tmp_path) == folder
    assert len(stand_in) == 1 and (folder / cache.MANIFEST).read_bytes() == before


def test_a_read_only_cache_that_fails_the_hash_says_what_is_wrong(tmp_path, stand_in, read_only):
    folder = emb.embedded_folder(NAME, tmp_path)
    _edit_later(folder / "model.safetensors", EDITED)
    read_only.append(tmp_path)
    with pytest.raises(ModelLoadError) as err:
        emb.embedded_folder(NAME, tmp_path)
    message = str(err.value)
    assert f"{folder}: the cached {NAME} cannot be used (model.safetensors differs" in message
    assert "cannot be written to" in message and f"rm -rf {folder}" in message
    assert "Read-only" not in message and len(stand_in) == 1
