"""The extension's style module loads every stylesheet of the extension. JupyterLab's
builder takes ``styleModule`` (style/index.js) over ``style`` (style/index.css): a sheet
imported only by index.css never reaches the page, and the Tasks sidebar drew its rows
unstyled ("succeeded0s…" run together) until a notebook widget happened to inject the
same rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

EXT = Path(__file__).resolve().parents[2] / "labextension"


def test_the_style_module_imports_every_sheet_of_index_css() -> None:
    pkg = json.loads((EXT / "package.json").read_text(encoding="utf-8"))
    module = (EXT / pkg["styleModule"]).read_text(encoding="utf-8")
    sheet = (EXT / pkg["style"]).read_text(encoding="utf-8")
    wanted = set(re.findall(r"@import url\(['\"]?([\w./-]+?)['\"]?\)", sheet))
    imported = {Path(p).name for p in re.findall(r"import ['\"]\./([\w./-]+)['\"]", module)}
    assert wanted, "index.css imports no sheet"
    assert wanted <= imported, f"{pkg['styleModule']} does not import {sorted(wanted - imported)}"
