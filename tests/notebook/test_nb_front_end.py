"""The widget's front end is built from the same sources as the sidebar's rows, from the
contract generated out of ``chongming_nb.notebook.schema``: a stale bundle, a stale
contract or a hand-copied name fails here (no node needed)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from chongming_nb.notebook import schema as S
from chongming_nb.server.contract import CONTRACT_TS, render_contract

STATIC = Path(S.__file__).parent / "static"
REPO = Path(__file__).resolve().parents[2]
EXT = REPO / "labextension"


def _stamp(text: str) -> tuple[list[str], str]:
    inputs = re.search(r"^ \* inputs: (.+)$", text, re.M)
    digest = re.search(r"^ \* sha256: ([0-9a-f]{32})$", text, re.M)
    assert inputs and digest, "the bundle has no inputs/sha256 header"
    return inputs.group(1).split(), digest.group(1)


def _hash(files: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.encode())
        h.update(b"\0")
        h.update((EXT / f).read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:32]


@pytest.mark.parametrize("name", ["widget.js", "widget.css"])
def test_bundle_is_built_from_the_current_sources(name: str) -> None:
    files, digest = _stamp((STATIC / name).read_text(encoding="utf-8"))
    assert _hash(files) == digest, (
        f"chongming_nb/notebook/static/{name} is older than its sources {files}: "
        "run `jlpm --cwd labextension run build:widget` (or scripts/build_labextension.sh)"
    )


def test_widget_and_sidebar_draw_rows_with_one_module() -> None:
    files, _ = _stamp((STATIC / "widget.js").read_text(encoding="utf-8"))
    assert {"src/row.ts", "src/format.ts", "src/contract.ts"} <= set(files)
    render = (EXT / "src" / "render.ts").read_text(encoding="utf-8")
    assert "from './row'" in render
    css_files, _ = _stamp((STATIC / "widget.css").read_text(encoding="utf-8"))
    assert "style/row.css" in css_files
    assert "row.css" in (EXT / "style" / "index.css").read_text(encoding="utf-8")


def test_the_bundled_contract_is_the_generated_one() -> None:
    # the contract the widget was bundled with carries the kernel's schema hash
    assert (REPO / CONTRACT_TS).read_text(encoding="utf-8") == render_contract()
    js = (STATIC / "widget.js").read_text(encoding="utf-8")
    assert f'SCHEMA_HASH = "{S.schema_hash()}"' in js


def _enumerations(source: str) -> list[set[str]]:
    """The status/verb names in each array or object literal of a TypeScript source
    (quoted values and bare keys alike)."""
    names = set(S.STATUSES) | set(S.VERBS)
    out = []
    for block in re.findall(r"\[[^\[\]]*\]|\{[^{}]*\}", source):
        quoted = re.findall(r"""['"`]([a-z_]+)['"`]""", block)
        keys = re.findall(r"(?:^|[{,\s])([a-z_]+)\s*:", block)
        found = names & (set(quoted) | set(keys))
        if found:
            out.append(found)
    return out


#: the fields of the status bar's "N running · M paused · K failed" (a shape, not a list)
STATUS_BAR_COUNTS = {"running", "paused", "failed"}


def test_no_front_end_source_copies_an_enumeration_by_hand() -> None:
    """Lists and maps of statuses or verbs (labels, tones, the verbs a row shows) live
    only in the generated contract; a single name elsewhere is typed against it
    (``TaskStatus``/``ControlVerb``), so tsc fails when Python renames it."""
    offenders = {}
    for path in sorted((EXT / "src").glob("*.ts")):
        if path.name == "contract.ts":
            continue
        copied = [
            sorted(f)
            for f in _enumerations(path.read_text(encoding="utf-8"))
            if len(f) >= 3 and f != STATUS_BAR_COUNTS
        ]
        if copied:
            offenders[path.name] = copied
    assert offenders == {}, f"hand-copied lists of names (import from contract.ts): {offenders}"


def test_the_enumeration_check_can_fail() -> None:
    copied = "export const VERB_LABELS = { pause: 'Pause', resume: 'Resume', stop: 'Stop' };"
    assert _enumerations(copied) == [{"pause", "resume", "stop"}]
    assert _enumerations("const ROW = ['queued', 'running', 'paused'];") == [
        {"queued", "running", "paused"}
    ]


def test_row_shape_is_generated_from_python() -> None:
    ts = (REPO / CONTRACT_TS).read_text(encoding="utf-8")
    block = ts[ts.index("export interface TaskRow {") :]
    block = block[: block.index("}")]
    keys = re.findall(r"^  (\w+): ", block, re.M)
    assert keys == list(S.ROW_FIELDS)
    listing = ts[ts.index("export interface ListingRow extends TaskRow {") :]
    listing = listing[: listing.index("}")]
    assert re.findall(r"^  (\w+): ", listing, re.M) == list(S.LISTING_ROW_TYPES)
