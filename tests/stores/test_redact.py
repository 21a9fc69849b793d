"""Password masking (``stores._target.redact``) is exact and linear: the URL user-info
pattern is written so that a long log line is scanned once, and it masks exactly what the
plain form of the pattern masks."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from chongming_nb.stores._target import MASK, redact

# the plain form: a try from every letter (quadratic in a long line of letters)
_PLAIN_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):([^@\s]*)@")


def _plain(text: str) -> str:
    return _PLAIN_USERINFO.sub(rf"\1:{MASK}@", text)


@settings(max_examples=3_000, deadline=None)
@given(st.text(alphabet="ab1+.-:/@ \n=", max_size=40))
def test_masks_exactly_what_the_plain_pattern_masks(text: str) -> None:
    # no "password=" can be spelled from this alphabet: only the user-info rule acts
    assert redact(text) == _plain(text)


def test_user_info_passwords_are_masked_wherever_the_scheme_starts() -> None:
    assert redact("postgresql://bob:s3cret@db/x") == f"postgresql://bob:{MASK}@db/x"
    assert redact("1http://u:p@h") == f"1http://u:{MASK}@h"  # scheme after a digit
    assert redact("-x+pg://u:p@h, see") == f"-x+pg://u:{MASK}@h, see"
    assert redact("sqlite:///tmp/a.db") == "sqlite:///tmp/a.db"


def test_a_long_line_of_letters_passes_unchanged() -> None:
    # what made `chongming logs` of a 10 MB log take minutes: 1 KB lines of one letter
    line = "y" * 1023
    assert redact(line) == line == _plain(line)
