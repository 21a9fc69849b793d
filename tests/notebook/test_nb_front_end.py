"""The widget's front end is built from the same sources as the sidebar's rows, from the
contract generated out of ``chongming_nb.notebook.schema``: a stale contract or a
hand-copied name fails here (no node needed). The bundle itself is a build output;
``tests/test_install.py`` checks the one the built package carries."""

from __future__ import annotations

import re
from pathlib import Path

from chongming_nb.notebook import schema as S
from chongming_nb.server.contract import CONTRACT_TS, render_contract

REPO = Path(__file__).resolve().parents[2]
EXT = REPO / "labextension"


def _imports(path: Path) -> set[str]:
    return set(re.findall(r"from '\./([a-z-]+)'", path.read_text(encoding="utf-8")))


def test_widget_and_sidebar_draw_rows_with_one_module() -> None:
    # the widget's bundle is built from src/widget.ts and style/widget.css (a build output:
    # tests/test_install.py checks that the built package carries it, from these sources)
    build = (EXT / "build-widget.mjs").read_text(encoding="utf-8")
    assert "bundle('src/widget.ts', 'widget.js'" in build
    assert "bundle('style/widget.css', 'widget.css'" in build
    assert {"row", "format", "contract"} <= _imports(EXT / "src" / "widget.ts")
    assert "row" in _imports(EXT / "src" / "render.ts")
    assert "row" in _imports(EXT / "src" / "snapshot.ts")
    assert "@import url('row.css')" in (EXT / "style" / "widget.css").read_text(encoding="utf-8")
    assert "row.css" in (EXT / "style" / "index.css").read_text(encoding="utf-8")


def test_the_contract_is_the_generated_one() -> None:
    # the contract the widget is bundled with carries the kernel's schema hash
    contract = (REPO / CONTRACT_TS).read_text(encoding="utf-8")
    assert contract == render_contract()
    assert f'SCHEMA_HASH = "{S.schema_hash()}"' in contract


def test_an_unbuilt_front_end_says_how_to_build_it(tmp_path: Path) -> None:
    from anywidget._util import try_file_contents

    from chongming_nb.notebook.widget import UNBUILT_ESM, front_end

    assert front_end(tmp_path, "widget.js", UNBUILT_ESM) == UNBUILT_ESM
    assert try_file_contents(UNBUILT_ESM) is None  # anywidget takes it as code, not a path
    assert "scripts/build_labextension.sh" in UNBUILT_ESM
    (tmp_path / "widget.js").write_text("export default {};")
    assert front_end(tmp_path, "widget.js", UNBUILT_ESM) == tmp_path / "widget.js"


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
