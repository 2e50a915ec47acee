"""Read terminal output: strip its escape sequences, or turn its colours into styled spans.

Log text is whatever a step printed, so it is hostile. This module never produces markup: a
rendered line is a list of ``(classes, text)`` pairs, the classes drawn only from the fixed
names below (``ansi-bold``, ``ansi-fg1`` …), and the page builds text nodes from the text
(``console.js``), so nothing a step prints is ever parsed as HTML.

What is understood: SGR (``ESC [ … m``) bold, faint, italic, underline and the 16 colours,
foreground and background; 256-colour and 24-bit colours are shown as the nearest of the 16.
Every other escape sequence (cursor moves, erase, OSC titles and hyperlinks, DCS strings,
charset switches) is dropped, as are other control characters; a carriage return keeps what
was written after it, as a terminal shows a progress line that rewrites itself.
"""

import re
from dataclasses import dataclass, replace

# One escape sequence (ECMA-48): CSI; OSC ended by BEL or ST; DCS/SOS/PM/APC strings ended by
# ST; two-byte and nF escapes (ESC 7, ESC ( B …), whose final byte cannot open a string.
_ESCAPE = (
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[PX^_][^\x1b]*\x1b\\"
    r"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"
)
ESCAPE = re.compile(_ESCAPE)
ESCAPE_BYTES = re.compile(_ESCAPE.encode())
# What a terminal would not print: C0 controls but tab, and DEL; a lone ESC is one of them.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
# An unfinished sequence at the end of what was read waits for the rest, up to this long
# (beyond it, it is not a sequence that will end).
HOLD_LIMIT = 4096

# xterm's default palette for the 16 colours, to place 256-colour and 24-bit colours.
PALETTE = (
    (0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0),
    (0, 0, 238), (205, 0, 205), (0, 205, 205), (229, 229, 229),
    (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0),
    (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255),
)  # fmt: skip
FLAGS = {1: "bold", 2: "faint", 3: "italic", 4: "underline"}
UNSET = {21: ("bold",), 22: ("bold", "faint"), 23: ("italic",), 24: ("underline",)}


@dataclass(frozen=True)
class Style:
    """The SGR attributes in force; colours are 0-15 or None (the default)."""

    fg: int | None = None
    bg: int | None = None
    bold: bool = False
    faint: bool = False
    italic: bool = False
    underline: bool = False

    @property
    def classes(self) -> str:
        """Return the CSS classes of this style (console.css styles each)."""
        names = [f"ansi-{flag}" for flag in FLAGS.values() if getattr(self, flag)]
        if self.fg is not None:
            names.append(f"ansi-fg{self.fg}")
        if self.bg is not None:
            names.append(f"ansi-bg{self.bg}")
        return " ".join(names)

    @classmethod
    def from_classes(cls, classes: str) -> "Style":
        """Return the style ``classes`` names; anything but a known class is ignored."""
        style = cls()
        for name in classes.split()[:8]:
            flag = name.removeprefix("ansi-")
            if flag in FLAGS.values():
                style = replace(style, **{flag: True})
            elif re.fullmatch(r"ansi-(fg|bg)(1[0-5]|[0-9])", name):
                style = replace(style, **{name[5:7]: int(name[7:])})
        return style


def strip(text: str) -> str:
    """Return ``text`` without escape sequences (colours, cursor moves, OSC) or lone ESCs."""
    return ESCAPE.sub("", text).replace("\x1b", "")


def unfinished_escape(data: bytes) -> int | None:
    """Return where an escape sequence that ``data`` ends in the middle of starts, or None."""
    position = data.find(b"\x1b", max(0, len(data) - HOLD_LIMIT))
    while position != -1:
        found = ESCAPE_BYTES.match(data, position)
        if found is None:
            return position
        position = data.find(b"\x1b", found.end())
    return None


def apply_sgr(style: Style, params: str) -> Style:
    """Return ``style`` changed by one SGR sequence's parameters (``"1;31"``, ``"38;5;208"``)."""
    codes = [int(p) if p.isdigit() else 0 for p in re.split("[;:]", params)] if params else [0]
    i = 0
    while i < len(codes):
        code = codes[i]
        if code == 0:
            style = Style()
        elif code in FLAGS:
            style = replace(style, **{FLAGS[code]: True})
        elif code in UNSET:
            style = replace(style, **dict.fromkeys(UNSET[code], False))
        elif 30 <= code <= 37 or 90 <= code <= 97:
            style = replace(style, fg=code - 30 if code < 90 else code - 82)
        elif 40 <= code <= 47 or 100 <= code <= 107:
            style = replace(style, bg=code - 40 if code < 100 else code - 92)
        elif code in (39, 49):
            style = replace(style, **{"fg" if code == 39 else "bg": None})
        elif code in (38, 48):
            colour, used = _extended_colour(codes[i + 1 :])
            if colour is not None:
                style = replace(style, **{"fg" if code == 38 else "bg": colour})
            i += used
        i += 1
    return style


def _extended_colour(rest: list[int]) -> tuple[int | None, int]:
    """Read ``5;n`` or ``2;r;g;b``; return the nearest of the 16 colours and codes used."""
    if rest[:1] == [5] and len(rest) >= 2:
        n = rest[1]
        if n < 16:
            return n, 2
        if n < 232:
            n -= 16
            levels = (0, 95, 135, 175, 215, 255)
            rgb = (levels[n // 36], levels[n // 6 % 6], levels[n % 6])
        else:
            grey = 8 + (n - 232) * 10
            rgb = (grey, grey, grey)
        return _nearest(rgb), 2
    if rest[:1] == [2] and len(rest) >= 4:
        return _nearest(tuple(rest[1:4])), 4
    return None, len(rest)


def _nearest(rgb: tuple) -> int:
    return min(
        range(16), key=lambda i: sum((a - b) ** 2 for a, b in zip(PALETTE[i], rgb, strict=True))
    )


def render_line(line: str, style: Style) -> tuple[list[list[str]], Style]:
    """Return one line's ``[classes, text]`` spans and the style in force at its end."""
    line = line.removesuffix("\r")
    spans: list[list[str]] = []
    parts = line.split("\r")
    for number, part in enumerate(parts):
        visible = number == len(parts) - 1  # text before a carriage return was overwritten
        position = 0
        for sgr in SGR.finditer(part):
            if visible:
                _add(spans, style, part[position : sgr.start()])
            style = apply_sgr(style, sgr.group(1))
            position = sgr.end()
        if visible:
            _add(spans, style, part[position:])
    return spans, style


def _add(spans: list[list[str]], style: Style, text: str) -> None:
    text = CONTROL.sub("", ESCAPE.sub("", text))
    if not text:
        return
    classes = style.classes
    if spans and spans[-1][0] == classes:
        spans[-1][1] += text
    else:
        spans.append([classes, text])


def drop_prefix(spans: list[list[str]], count: int) -> list[list[str]]:
    """Return ``spans`` without their first ``count`` characters of text."""
    kept = []
    for classes, text in spans:
        taken = min(count, len(text))
        count -= taken
        if text[taken:]:
            kept.append([classes, text[taken:]])
    return kept
