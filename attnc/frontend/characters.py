"""What a character outside the language is, said so that a user can find it.

Outside comments the language is ASCII. A non-ASCII character is named with its code
point and Unicode name, and where it passes for an ASCII one -- a Cyrillic `е` in
`attеntion`, a full-width `１` -- with the character it looks like, since the source
line shows nothing wrong:

    unexpected character 'е' (U+0435 CYRILLIC SMALL LETTER IE), which looks like
    the ASCII 'e': names use ASCII letters, digits and '_'
"""
from __future__ import annotations

import unicodedata

# Letters of other scripts drawn like an ASCII letter in common fonts (Cyrillic, Greek,
# Latin dotless i). Compatibility forms -- full-width, mathematical, ligatures -- are found
# by NFKC instead.
_LOOKALIKE_PAIRS = (
    ("аеорсухіјѕԁһԛԝӏ", "aeopcyxijsdhqwl"),         # Cyrillic small
    ("АВЕКМНОРСТХЅІЈҮ", "ABEKMHOPCTXSIJY"),         # Cyrillic capital
    ("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX"),           # Greek capital
    ("ονı", "ovi"),                                 # Greek small omicron, nu; dotless i
)
LOOKALIKES: dict[str, str] = {c: a for others, ascii in _LOOKALIKE_PAIRS for c, a in zip(others, ascii)}


def ascii_lookalike(ch: str) -> str | None:
    """The ASCII text `ch` passes for ('e' for a Cyrillic 'е', '1' for a full-width '１'),
    or None."""
    if ch in LOOKALIKES:
        return LOOKALIKES[ch]
    folded = unicodedata.normalize("NFKC", ch)
    if folded != ch and folded.isascii() and folded.isprintable() and not folded.isspace():
        return folded
    return None


def describe_non_ascii(ch: str) -> str:
    """The message for a non-ASCII character where the language expects ASCII."""
    name = unicodedata.name(ch, "")
    code = f"U+{ord(ch):04X}" + (f" {name}" if name else "")
    shown = f"'{ch}' ({code})" if ch.isprintable() and not ch.isspace() else code
    looks = ascii_lookalike(ch)
    like = f", which looks like the ASCII '{looks}'" if looks else ""
    return f"unexpected character {shown}{like}: {_what_is_ascii(ch)}"


def _what_is_ascii(ch: str) -> str:
    kind = unicodedata.category(ch)[0]
    if kind == "N":
        return "numbers use ASCII digits"
    if kind in "LM":
        return "names use ASCII letters, digits and '_'"
    return "outside comments the language is ASCII"


def continues_a_name(ch: str) -> bool:
    """Whether a non-ASCII `ch` right after a name reads as part of it (a letter, a mark
    or a digit of another script): the name was cut there."""
    return not ch.isascii() and unicodedata.category(ch)[0] in "LMN"
