"""Password masking (``stores._target.redact``) is exact and linear: the URL user-info
pattern is written so that a long log line is scanned once, and it masks exactly what the
plain form of the pattern masks."""

from __future__ import annotations

import re
from typing import Any

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


def _every_pattern(text: str) -> str:
    """redact without its literal pre-checks: both patterns run over every text."""
    from chongming_nb.stores import _target

    out = _target._USERINFO.sub(rf"\g<lead>\g<user>:{MASK}@", text)
    return _target._SECRET_VALUE.sub(rf"\g<1>{MASK}", out)


@settings(max_examples=3_000, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            (
                *("password", "PassWord", "pa\u017f\u017fword", "SSLPASSWORD", "=", " ", "'"),
                *("\\", "://", "pg", "u", ":", "@", "h", "&", "x", "1", "\u212a", "\u00df"),
            )
        ),
        max_size=14,
    ).map("".join)
)
def test_the_literal_pre_checks_never_change_what_is_masked(text: str) -> None:
    # the skips ("://" absent, "password" absent after case folding) are pure speed: the
    # long-s spelling and other case-insensitive matches are still found
    assert redact(text) == _every_pattern(text)


def test_a_case_folded_password_keyword_is_still_masked() -> None:
    assert redact("pa\u017f\u017fword=hunter2 x") == f"pa\u017f\u017fword={MASK} x"
    assert redact("SSLPassword = 'a b' end") == f"SSLPassword = {MASK} end"


def test_a_big_listing_without_urls_or_keywords_is_not_scanned(monkeypatch: Any) -> None:
    # `chongming ps --json --limit 0` of a big store writes megabytes through redact
    from chongming_nb.stores import _target

    class _Refuses:
        def sub(self, *args: object) -> str:
            raise AssertionError("a pattern was run over text that cannot hold its match")

    monkeypatch.setattr(_target, "_USERINFO", _Refuses())
    monkeypatch.setattr(_target, "_SECRET_VALUE", _Refuses())
    listing = "\n".join(f"t{i:06d}  succeeded  load_{i}" for i in range(20_000))
    assert redact(listing) is listing
    assert redact(listing, ["load_7"]).count(MASK) == 1_111  # the literal secrets still are
