"""The lake's files outside Spark: what the project lists, reads, writes, moves and deletes itself (the landing's
batches and footers, withdrawal notes, Delta logs it reads, plans' shadow tables it drops), on a local folder or on
object storage (`s3a://bucket/prefix`), through one code path: pyarrow's file systems.

Object storage has no folders and no rename: a folder is a prefix (it exists while something is under it), a listing
pages (pyarrow pages it), a move is a copy then a delete, and a write becomes visible whole when it ends. The local
folder is given the same semantics: a write goes to a temporary name of its own, synced, then is renamed over the
target (or, to create a file only where none is, linked to it).

A lake path is a string: an absolute local path, or `s3a://bucket/key`, the form Spark reads and writes."""

import functools
import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

OBJECT_STORE_SCHEME = "s3a://"
T = TypeVar("T")


class StorageError(RuntimeError):
    pass


def _reached(operation: Callable[..., T]) -> Callable[..., T]:
    """On object storage, a store that does not answer or refuses the keys is one line naming the variables to check
    (a StorageError, which a command prints as its error), not pyarrow's traceback. A missing file stays
    FileNotFoundError, and a file in the way of one created or moved FileExistsError, which callers handle."""

    @functools.wraps(operation)
    def reached(path: str, *args: object, **kwargs: object) -> T:
        try:
            return operation(path, *args, **kwargs)
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError as error:
            if not on_object_store(path):
                raise
            why = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            endpoint = os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
            raise StorageError(
                f"object storage at {endpoint} did not serve {path}: {why} (check AWS_ENDPOINT_URL, AWS_REGION, "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for the project's own server: "
                "bash scripts/object-store.sh status, then source .object-store/env)"
            ) from None

    return reached


@dataclass(frozen=True)
class StoredEntry:
    """A file or folder (a prefix on object storage) of the lake."""

    path: str  # a lake path: absolute, or s3a://bucket/key
    is_folder: bool
    size: int  # bytes; 0 for a folder
    modified_ns: int | None  # None where the storage does not say

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


def on_object_store(path: str) -> bool:
    return path.startswith(OBJECT_STORE_SCHEME)


def join(root: str, *parts: str) -> str:
    """`root/part/...`, keeping `s3a://` whole (a pathlib join would fold its double slash)."""
    joined = root.rstrip("/")
    for part in parts:
        if part:
            joined = f"{joined}/{part.strip('/')}"
    return joined


def relative_to(path: str, root: str) -> str:
    """`path` below `root`, as a relative `a/b`; a StorageError when it is not below it."""
    root = root.rstrip("/") + "/"
    if not path.startswith(root):
        raise StorageError(f"{path} is not under {root}")
    return path[len(root) :]


def parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


def normalized(path: str) -> str:
    """A lake path as Spark names it: `file:` prefixes dropped, `s3a://` kept; a local path made absolute."""
    if on_object_store(path):
        return path
    if path.startswith("file:"):
        path = urlparse(path).path
    return os.path.abspath(path)


def _object_store() -> "pafs.FileSystem":
    """The S3 file system of AWS_ENDPOINT_URL (or AWS itself when unset), with the credentials and region of the
    standard AWS variables, which pyarrow's AWS SDK reads from the environment (never a command line)."""
    keys = f"{os.environ.get('AWS_ACCESS_KEY_ID', '')}:{os.environ.get('AWS_SECRET_ACCESS_KEY', '')}"
    return _object_store_at(
        os.environ.get("AWS_ENDPOINT_URL", ""),
        os.environ.get("AWS_REGION", ""),
        hashlib.sha256(keys.encode()).hexdigest(),
    )


@lru_cache(maxsize=4)
def _object_store_at(endpoint: str, region: str, keys: str) -> "pafs.FileSystem":
    """One per endpoint, region and key pair (`keys`, a digest): pyarrow reads the keys when it is made."""
    import pyarrow.fs as pafs

    options: dict[str, object] = {"region": region} if region else {}
    if endpoint:
        parsed = urlparse(endpoint)
        options |= {"endpoint_override": parsed.netloc or parsed.path, "scheme": parsed.scheme or "https"}
    return pafs.S3FileSystem(**options)


def _located(path: str) -> tuple["pafs.FileSystem", str]:
    """The file system holding `path` and the path in it."""
    import pyarrow.fs as pafs

    if on_object_store(path):
        return _object_store(), path[len(OBJECT_STORE_SCHEME) :].rstrip("/")
    return pafs.LocalFileSystem(), normalized(path)


def _lake_path(path: str, of: str) -> str:
    """A path the file system returned, named as the lake names it (`of` tells which file system)."""
    return OBJECT_STORE_SCHEME + path if on_object_store(of) else path


def _entry(info: "pafs.FileInfo", of: str) -> StoredEntry:
    import pyarrow.fs as pafs

    folder = info.type == pafs.FileType.Directory
    return StoredEntry(_lake_path(info.path, of), folder, 0 if folder else info.size or 0, info.mtime_ns)


@_reached
def listing(folder: str, *, recursive: bool = False) -> list[StoredEntry]:
    """What is in `folder` (and below, when recursive), sorted by path; empty when it does not exist."""
    import pyarrow.fs as pafs

    fs, inner = _located(folder)
    infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True, recursive=recursive))
    return sorted((_entry(i, folder) for i in infos), key=lambda e: e.path)


def files_below(folder: str) -> list[StoredEntry]:
    """Every file below `folder`, at any depth, sorted by path."""
    return [e for e in listing(folder, recursive=True) if not e.is_folder]


@_reached
def stat(path: str) -> StoredEntry | None:
    import pyarrow.fs as pafs

    fs, inner = _located(path)
    info = fs.get_file_info(inner)
    return None if info.type == pafs.FileType.NotFound else _entry(info, path)


def exists(path: str) -> bool:
    return stat(path) is not None


def is_folder(path: str) -> bool:
    entry = stat(path)
    return entry is not None and entry.is_folder


@_reached
def read_bytes(path: str) -> bytes:
    fs, inner = _located(path)
    with fs.open_input_stream(inner) as stream:
        return bytes(stream.read())


@dataclass(frozen=True)
class FileDigest:
    """A file's size and SHA-256: two files with the same are the same bytes."""

    size: int
    sha256: str

    def describe(self) -> str:
        return f"{self.size} bytes, sha256 {self.sha256}"


@_reached
def digest(path: str) -> FileDigest:
    """The size and SHA-256 of the file at `path`, read in pieces (a landed file may be large)."""
    fs, inner = _located(path)
    sha, size = hashlib.sha256(), 0
    with fs.open_input_stream(inner) as stream:
        while piece := stream.read(8 << 20):
            sha.update(piece)
            size += len(piece)
    return FileDigest(size, sha.hexdigest())


def _synced_temporary(inner: str, data: bytes) -> str:
    """`data` in a new file beside `inner`, of a name no other writer uses (`.<name>.<uuid>.tmp`), on disk: a crash
    after the rename or link that follows cannot leave the target empty or half written."""
    folder, name = os.path.split(inner)
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask keeps it private
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def _sync_folder(folder: str) -> None:
    """A rename, link or unlink in `folder` on disk (a file's own fsync does not cover its name)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@_reached
def write_bytes(path: str, data: bytes) -> None:
    """`path` holds `data`, whole: no reader sees part of it, and a crash leaves the old content or the new."""
    fs, inner = _located(path)
    if on_object_store(path):  # one PUT: the object appears whole when it ends
        with fs.open_output_stream(inner) as stream:
            stream.write(data)
        return
    os.replace(_synced_temporary(inner, data), inner)
    _sync_folder(os.path.dirname(inner))


@_reached
def create_bytes(path: str, data: bytes) -> None:
    """A new file at `path` holding `data`, whole; FileExistsError, and nothing written, when something is there.

    On a local folder the synced file is linked to `path`, which fails if the name is taken. pyarrow's S3 file system
    sends no conditional PUT (no If-None-Match: the metadata it passes is a fixed list of headers), so on object
    storage the check and the PUT are two requests: a writer between them is replaced."""
    fs, inner = _located(path)
    if on_object_store(path):
        if exists(path):
            raise FileExistsError(path)
        with fs.open_output_stream(inner) as stream:
            stream.write(data)
        return
    temporary = _synced_temporary(inner, data)
    try:
        os.link(temporary, inner)
    finally:
        os.unlink(temporary)
    _sync_folder(os.path.dirname(inner))


@_reached
def move(source: str, target: str) -> None:
    """`source` to `target`, never over a file there (FileExistsError, nothing moved). On a local folder a link then an
    unlink, where a crash in between leaves the same file at both; on object storage a check, a copy then a delete
    (no conditional copy through pyarrow), where a crash leaves both too. Either way what is at `target` is the
    source's bytes, and a caller that finds both can tell by their digests."""
    fs, inner_source = _located(source)
    _, inner_target = _located(target)
    if on_object_store(source):
        if exists(target):
            raise FileExistsError(target)
        fs.copy_file(inner_source, inner_target)
        fs.delete_file(inner_source)
        return
    os.makedirs(os.path.dirname(inner_target), exist_ok=True)
    os.link(inner_source, inner_target)
    _sync_folder(os.path.dirname(inner_target))
    delete_file(source)


@_reached
def move_tree(source: str, target: str) -> None:
    """The folder `source` to `target`, where nothing is (FileExistsError, nothing moved). On a local folder one
    rename, atomic; on object storage each file copied, then the source deleted, where a crash leaves both (the
    source whole: a second move to another target starts again)."""
    fs, inner_source = _located(source)
    _, inner_target = _located(target)
    if exists(target):
        raise FileExistsError(target)
    if on_object_store(source):
        for entry in files_below(source):
            fs.copy_file(_located(entry.path)[1], _located(join(target, relative_to(entry.path, source)))[1])
        delete_tree(source)
        return
    os.makedirs(os.path.dirname(inner_target), exist_ok=True)
    os.rename(inner_source, inner_target)
    _sync_folder(os.path.dirname(inner_target))


@_reached
def delete_file(path: str) -> None:
    """The file at `path` deleted (FileNotFoundError when there is none)."""
    fs, inner = _located(path)
    if on_object_store(path):
        fs.delete_file(inner)
        return
    os.unlink(inner)
    _sync_folder(os.path.dirname(inner))


@_reached
def delete_tree(folder: str) -> None:
    """`folder` and everything below it; nothing when it does not exist."""
    import pyarrow.fs as pafs

    fs, inner = _located(folder)
    if fs.get_file_info(inner).type != pafs.FileType.NotFound:
        fs.delete_dir(inner)


@_reached
def parquet_footer(path: str) -> "pq.FileMetaData":
    import pyarrow.parquet as pq

    fs, inner = _located(path)
    return pq.read_metadata(inner, filesystem=fs)


def total_size(files: list[str], folder: str) -> int:
    """The bytes of `files`, all below `folder`: each file's size on a local folder; on object storage from one
    listing of the folder, which pages, rather than a request per file."""
    if not files:
        return 0
    if not on_object_store(folder):
        return sum(os.path.getsize(f) for f in files)
    sizes = {f.path: f.size for f in files_below(folder)}
    missing = [f for f in files if f not in sizes]
    if missing:
        raise StorageError(f"{missing[0]} is not in {folder} any more ({len(missing)} file(s)): read it again")
    return sum(sizes[f] for f in files)
