"""The sandbox image's name: a tag derived from the content of its recipe (sandbox/image/).

The tag is the one source of truth shared by the build script (`sandbox/image/build.sh` asks
`python3 -m sandbox.image tag`) and the daemon (`default_image_ref()`), so the daemon always asks
for exactly the image the current recipe builds, and editing the recipe means a new tag, never a
stale image. Standard library only: the build script runs this before any virtualenv exists.

Command line (from the repository root)::

    python3 -m sandbox.image tag     # tooljail-sandbox:<12 hex>
    python3 -m sandbox.image hash    # the full sha256 of the recipe
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

#: Repository part of every sandbox image tag.
IMAGE_REPOSITORY = "tooljail-sandbox"
#: Moving tag that always points at the most recently built recipe (for humans; the daemon uses the
#: content tag).
LATEST_REF = f"{IMAGE_REPOSITORY}:latest"
#: The recipe: every file in this directory affects the image.
RECIPE_DIR = Path(__file__).resolve().parent / "image"
#: Bumped when the hashing scheme itself changes, so old tags cannot collide with new ones.
_HASH_SCHEME = b"tooljail-sandbox-recipe/1\0"
#: Hex digits of the hash used in the tag (48 bits: collisions between recipes are not a concern).
_TAG_HEX = 12


_LOCAL_REFERENCE = re.compile(r"[a-z0-9][a-z0-9._/:@-]{0,254}")


def checked_reference(image: str) -> str:
    """`image` when it is a reference an operator may name ("" included: the sandbox image);
    ValueError otherwise (so it can never be read as an engine option or a URL)."""
    if image and not _LOCAL_REFERENCE.fullmatch(image):
        raise ValueError("an image reference (lower-case name[:tag] or @digest)")
    return image


def recipe_files(recipe_dir: Path = RECIPE_DIR) -> list[Path]:
    """The files that make up the recipe, in hashing order (sorted by name).

    Hidden files and caches are skipped: editor swap files must not change the tag.
    """
    if not recipe_dir.is_dir():
        raise FileNotFoundError(
            f"sandbox image recipe directory {recipe_dir} is missing; "
            "restore sandbox/image/ from the repository"
        )
    return sorted(
        (
            path
            for path in recipe_dir.iterdir()
            if path.is_file() and not path.name.startswith(".") and path.suffix != ".pyc"
        ),
        key=lambda path: path.name,
    )


def recipe_hash(recipe_dir: Path = RECIPE_DIR) -> str:
    """The sha256 (hex) of the recipe's file names and contents."""
    digest = hashlib.sha256(_HASH_SCHEME)
    for path in recipe_files(recipe_dir):
        data = path.read_bytes()
        # Name and length framing: moving bytes from one file to another changes the hash.
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def default_image_ref(recipe_dir: Path = RECIPE_DIR) -> str:
    """The tag the current recipe builds, e.g. ``tooljail-sandbox:0123456789ab``."""
    return f"{IMAGE_REPOSITORY}:{recipe_hash(recipe_dir)[:_TAG_HEX]}"


def image_present(client: docker.DockerClient, ref: str | None = None) -> bool:
    """Whether the Docker engine behind `client` has the image `ref` (default: the current tag)."""
    # Imported here: the rest of this module must work without the docker SDK installed.
    import docker.errors

    try:
        client.images.get(ref or default_image_ref())
    except docker.errors.ImageNotFound:
        return False
    return True


def main(argv: list[str]) -> int:
    """Prints the tag or the hash; see the module docstring."""
    commands = {"tag": default_image_ref, "hash": recipe_hash}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python3 -m sandbox.image {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    print(commands[argv[0]]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
