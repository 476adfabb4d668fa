"""A synthetic many-rank dump for the scale-out tests: the real stats_mix_step0 pair copied to every rank, with
the golden statistics of one rank-dependent API output scaled, so that each rank has its own first divergence."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASE = FIXTURES / "stats_mix_step0"
STAMP = re.compile(r"_\d{14}(?=\.|_)")
STAMP_TEXT = re.compile(rb"_\d{14}(?=\.|_)")


def make_ranks(root: Path, ranks: int = 16) -> tuple[Path, Path]:
    """root/{target,golden}/step0/rank<N>/{dump,stack,construct}.json; returns the two step folders."""
    golden = json.loads((CASE / "golden" / "dump.json").read_text())
    apis = [name for name in golden["data"] if name.startswith("Functional.") and name.endswith(".forward")]
    for rank in range(ranks):
        for side in ("target", "golden"):
            folder = root / side / "step0" / f"rank{rank}"
            folder.mkdir(parents=True)
            for name in ("stack.json", "construct.json"):
                shutil.copy(CASE / side / name, folder / name)
        shutil.copy(CASE / "target" / "dump.json", root / "target" / "step0" / f"rank{rank}" / "dump.json")
        changed = json.loads(json.dumps(golden))
        output = changed["data"][apis[(rank * 7) % len(apis)]]["output"][0]
        for stat in ("Max", "Norm"):
            if isinstance(output.get(stat), (int, float)):
                output[stat] = output[stat] * (1.5 + rank / 100)
        (root / "golden" / "step0" / f"rank{rank}" / "dump.json").write_text(json.dumps(changed))
    return root / "target" / "step0", root / "golden" / "step0"


def result_files(out: Path) -> dict:
    """Relative path without its timestamp -> content without timestamps (the summary of multi_acc_check names
    the device files), for every result file under `out`; markers and temporary files are left out."""
    found = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            found[STAMP.sub("", str(relative))] = STAMP_TEXT.sub(b"", path.read_bytes())
    return found
