"""The output folder of a training run. A folder is "a run of ours" when it holds one of :data:`RUN_FILES`
(``.subspaces-run.json`` lists the names the run wrote); into anything else, and over a file the run did not write,
a run writes only with ``overwrite``. Files are never deleted, only replaced.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from subspaces.errors import SubspacesError
from subspaces.io import save_json

MANIFEST = ".subspaces-run.json"
CHECKPOINT = "checkpoint.pt"
CHECKPOINT_META = "checkpoint.json"  # the run's fingerprint, read before checkpoint.pt is opened
STATE = "trainer_state.json"
STAGING = ".model-saving"  # the next model is written here, then moved into place file by file
RUN_FILES = (CHECKPOINT, CHECKPOINT_META, STATE, MANIFEST)


def check_output_dir(folder: str | Path, overwrite: bool = False) -> None:
    """Refuse a file, or a non-empty folder that is not a run of ours (unless ``overwrite``). Writes nothing."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise SubspacesError(f"--output {folder} is a file; name a folder for the run")
    if not folder.is_dir() or overwrite or any((folder / name).exists() for name in RUN_FILES):
        return
    entries = sorted(p.name for p in folder.iterdir())
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise SubspacesError(
            f"--output {folder} holds {len(entries)} entries that are not a subspaces run ({shown}); choose a new "
            "or empty folder, or pass --overwrite to write into it (the run then replaces only the names it writes)"
        )


def remove_stale_temporaries(folder: Path) -> None:
    """Delete what an earlier run of ours left half-written when it was killed (SIGKILL, power loss)."""
    for path in [p for name in RUN_FILES for p in folder.glob(f".{name}.*.tmp*")]:  # subspaces.io.atomic_path's names
        path.unlink(missing_ok=True)
    if (folder / STAGING).is_dir():
        shutil.rmtree(folder / STAGING)


def save_model_files(folder: Path, write: Callable[[Path], None], *, overwrite: bool = False) -> None:
    """Run ``write(staging)`` and move what it wrote into ``folder`` one entry at a time (an interrupt leaves each
    whole); an entry the run did not write is a user's file: refused (nothing moved) unless ``overwrite``."""
    staging = folder / STAGING
    if staging.exists():
        shutil.rmtree(staging)
    write(staging)
    produced = sorted(p.name for p in staging.iterdir())
    try:
        ours = set(json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        ours = set()
    foreign = [name for name in produced if (folder / name).exists() and name not in ours]
    if foreign and not overwrite:
        shutil.rmtree(staging)
        raise SubspacesError(
            f"{folder} holds {', '.join(foreign)}, not written by this run; the model was not saved over them "
            "(move them away, or pass --overwrite)"
        )
    # The manifest first: a crash after it only claims names that are about to be ours.
    save_json(folder / MANIFEST, {"files": sorted(ours | set(produced))})
    for item in staging.iterdir():
        dest = folder / item.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        item.replace(dest)
    staging.rmdir()
