"""Terminal output read for people: escapes stripped, SGR colours turned into known classes."""

import pytest

from deployments.log_render import Style, apply_sgr, drop_prefix, render_line, strip
from deployments.log_render import unfinished_escape as unfinished

ESC = "\x1b"


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        (f"{ESC}[1;31mred{ESC}[0m ok", "red ok"),
        (f"{ESC}[38;5;208morange{ESC}[m", "orange"),
        (f"{ESC}[2K{ESC}[1Gcursor{ESC}[3A", "cursor"),  # erase, column, up
        (f"{ESC}]0;a title\x07after", "after"),  # OSC ended by BEL
        (f"{ESC}]8;;https://x.test{ESC}\\link{ESC}]8;;{ESC}\\", "link"),  # OSC 8 hyperlink
        (f"{ESC}(Bcharset {ESC}7saved", "charset saved"),
        (f"a lone {ESC}", "a lone "),
        (f"unfinished {ESC}[1;3", "unfinished [1;3"),  # at the very end: nothing more will come
        ("no escapes at all\n", "no escapes at all\n"),
    ],
)
def test_strip_removes_every_escape_sequence(raw, plain):
    assert strip(raw) == plain


def test_an_escape_cut_at_the_end_is_found_and_a_whole_one_is_not():
    assert unfinished(b"text \x1b[1;3") == 5
    assert unfinished(b"text \x1b") == 5
    assert unfinished(b"text \x1b]0;title") == 5
    assert unfinished(b"text \x1b]0;title\x1b") == 5  # the ST's ESC has not got its backslash
    assert unfinished(b"text \x1b[1;31mred\x1b[0m") is None
    assert unfinished(b"text \x1b]8;;u\x1b\\x") is None
    assert unfinished(b"plain") is None


def test_sgr_sets_and_resets_attributes_and_colours():
    style = apply_sgr(Style(), "1;31;44")
    assert style == Style(fg=1, bg=4, bold=True)
    assert apply_sgr(style, "22;39") == Style(bg=4)
    assert apply_sgr(style, "") == Style()
    assert apply_sgr(Style(), "92;103") == Style(fg=10, bg=11)
    assert apply_sgr(Style(), "38;5;9").fg == 9  # 256-colour, one of the 16
    assert apply_sgr(Style(), "38;5;196").fg == 9  # the cube's red: bright red
    assert apply_sgr(Style(), "38;2;0;0;0;1").fg == 0 and apply_sgr(Style(), "38;2;0;0;0;1").bold
    assert apply_sgr(Style(), "48;5;231").bg == 15  # the cube's white
    assert apply_sgr(Style(), "48;5;255").bg == 7  # the lightest grey: light grey


def test_a_line_becomes_spans_of_known_classes_and_keeps_its_style_for_the_next():
    spans, style = render_line(f"plain {ESC}[1;32mgreen bold{ESC}[22m green", Style())
    assert spans == [
        ["", "plain "],
        ["ansi-bold ansi-fg2", "green bold"],
        ["ansi-fg2", " green"],
    ]
    assert style == Style(fg=2)
    spans, _ = render_line("still green", style)
    assert spans == [["ansi-fg2", "still green"]]


def test_a_hostile_line_stays_text_and_other_controls_go():
    line = f'<script>alert(1)</script> "><img src=x onerror=alert(2)>{ESC}[5A\x07\x08'
    spans, _ = render_line(line, Style())
    assert spans == [["", '<script>alert(1)</script> "><img src=x onerror=alert(2)>']]


def test_a_carriage_return_keeps_what_was_written_after_it():
    spans, style = render_line(f"{ESC}[33m 10%\r 50%\r100% done\r", Style())
    assert spans == [["ansi-fg3", "100% done"]]
    assert style == Style(fg=3)


def test_a_style_survives_its_class_names_and_nothing_else_does():
    style = Style(fg=13, bg=0, bold=True, underline=True)
    assert Style.from_classes(style.classes) == style
    assert Style.from_classes('ansi-fg99 x" onload=1 ansi-bg16 ansi-italic') == Style(italic=True)


def test_drop_prefix_crosses_spans():
    assert drop_prefix([["a", "--"], ["b", "- title"]], 4) == [["b", "title"]]
