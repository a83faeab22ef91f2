"""Placeholder sanitizing (the table of docs/behaviour.md) and the content check of step 4."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import MemoryStatus
from worker.core.model import Rejection
from worker.core.sanitize import prepare_content, sanitize_placeholders

# Every row of the table in docs/behaviour.md, "Sanitizing placeholders".
SPEC_TABLE = [
    ("{alice} likes {user}", "alice likes {user}"),
    ("{User} and {BOT}", "{User} and {BOT}"),
    ("{{bot}} {{foo}}", "{{bot}} foo"),
    ("{{{foo}}}", "foo"),
    ("{{{user}}}", "{{{user}}}"),
    ("{ user }", "{ user }"),
    ("{user-name}", "{user-name}"),
    ("{123}", "{123}"),
    ("{日本}", "{日本}"),
    ('json {"a":1}', 'json {"a":1}'),
    ("{a_b1}", "a_b1"),
    ("{foo}}", "foo}"),
]


@pytest.mark.parametrize(("text", "expected"), SPEC_TABLE)
def test_spec_table(text: str, expected: str) -> None:
    assert sanitize_placeholders(text) == expected


@pytest.mark.parametrize(
    "token",
    ["{user}", "{bot}", "{char}", "{USER}", "{Bot}", "{cHaR}", "{{user}}", "{{CHAR}}", "{{Bot}}"],
)
def test_template_tokens_keep_their_braces(token: str) -> None:
    assert sanitize_placeholders(f"ask {token} first") == f"ask {token} first"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{Alice}", "Alice"),
        ("{{Alice}}", "Alice"),
        ("{x}", "x"),
        ("{X9_}", "X9_"),
        ("{users}", "users"),  # only the exact tokens are kept
        ("{username}", "username"),
        ("{botany}", "botany"),
        ("{_foo}", "{_foo}"),  # a word starts with a letter
        ("{9lives}", "{9lives}"),
        ("{café}", "{café}"),  # non-ASCII letters are not word characters
        ("{ＡＢＣ}", "{ＡＢＣ}"),
        ("{}", "{}"),
        ("{{}}", "{{}}"),
        ("{{foo}", "{foo"),
        ("{{{{foo}}}}", "foo"),
        ("{{foo}bar}", "foobar"),  # what one pass uncovers is sanitized too
        ("{{{{user}}}}", "{{{{user}}}}"),
        ("{a}{b}{user}{c}", "ab{user}c"),
        ("{a}\n{b}", "a\nb"),
        ("no braces at all", "no braces at all"),
    ],
)
def test_other_cases(text: str, expected: str) -> None:
    assert sanitize_placeholders(text) == expected


@given(st.text())
def test_sanitize_is_idempotent(text: str) -> None:
    once = sanitize_placeholders(text)
    assert sanitize_placeholders(once) == once


@given(st.text(alphabet=st.characters(blacklist_characters="{}")))
def test_text_without_braces_is_unchanged(text: str) -> None:
    assert sanitize_placeholders(text) == text


@given(st.text(alphabet=st.sampled_from("{}ab_1 uUsebrotch")))
def test_sanitize_only_removes_braces(text: str) -> None:
    sanitized = sanitize_placeholders(text)
    assert sanitized.replace("{", "").replace("}", "") == text.replace("{", "").replace("}", "")


@given(st.text(alphabet=st.sampled_from("{}ab_1 \t\nuUsebrotch")))
def test_sanitizing_trimmed_text_keeps_it_trimmed_and_non_empty(text: str) -> None:
    trimmed = text.strip()
    sanitized = sanitize_placeholders(trimmed)
    assert sanitized == sanitized.strip()
    assert bool(sanitized) == bool(trimmed)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  likes {tea}  ", "likes tea"),
        ("\n{user} likes tea\t", "{user} likes tea"),
        ("", ""),
        ("   \n\t ", ""),
    ],
)
def test_prepare_content(raw: str, expected: str) -> None:
    assert prepare_content(raw, 1000) == expected


def test_prepare_content_counts_code_points_after_sanitizing() -> None:
    # 1000 code points once the braces are gone, although 1002 were sent.
    assert prepare_content("{" + "a" * 1000 + "}", 1000) == "a" * 1000
    # Non-BMP characters count as one each.
    assert prepare_content("🙂" * 1000, 1000) == "🙂" * 1000
    # Surrounding white space does not count.
    assert prepare_content("  " + "a" * 1000 + "  ", 1000) == "a" * 1000


def test_prepare_content_rejects_too_long_update() -> None:
    result = prepare_content("a" * 1001, 1000)
    assert isinstance(result, Rejection)
    assert result.status is MemoryStatus.INVALID_CONTENT
    assert "1001" in result.message
    assert "1000" in result.message


def test_prepare_content_limit_is_configurable() -> None:
    assert prepare_content("abcde", 5) == "abcde"
    result = prepare_content("abcdef", 5)
    assert isinstance(result, Rejection)
    assert result.status is MemoryStatus.INVALID_CONTENT
    assert "6" in result.message
    assert "5" in result.message


def test_prepare_content_keeps_template_tokens_in_the_length() -> None:
    result = prepare_content("{user}" * 200, 1000)
    assert isinstance(result, Rejection)
    assert result.status is MemoryStatus.INVALID_CONTENT


@pytest.mark.parametrize("raw", ["a\x00b", "\x00", "  \x00  "])
def test_content_with_nul_is_refused_not_altered(raw: str) -> None:
    # PostgreSQL text cannot hold NUL; storing something else would change the memory.
    refused = prepare_content(raw, 1000)
    assert isinstance(refused, Rejection)
    assert refused.status is MemoryStatus.INVALID_CONTENT
    assert "NUL" in refused.message


# Content that is not empty but shows nothing: zero-width and format characters (Cf),
# controls (Cc), combining marks with nothing to sit on (M*, variation selectors among them),
# the Hangul fillers (letters that Unicode says to render as nothing), and white space (Z*)
# between them, which trimming leaves.
INVISIBLE = [
    "\u200b",  # ZERO WIDTH SPACE
    "\u200b\u200c\u200d",  # and the non-joiner and joiner
    "\u2060",  # WORD JOINER
    "\ufeff",  # ZERO WIDTH NO-BREAK SPACE (BOM)
    "\u00ad",  # SOFT HYPHEN
    "\u180e",  # MONGOLIAN VOWEL SEPARATOR
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\U000e0041\U000e007f",  # tag characters
    "\x01\x7f",  # controls that are not white space
    "\u0301",  # a combining acute accent, on nothing
    "\ufe0f",  # VARIATION SELECTOR-16, on nothing
    "\u034f",  # COMBINING GRAPHEME JOINER
    "\u3164",  # HANGUL FILLER
    "\u115f\u1160\uffa0",  # the other Hangul fillers
    " \u200b ",  # blank around it: trimmed, then nothing visible is left
    "\u200b \u2028\u200b",  # white space inside is no visible character either
]


@pytest.mark.parametrize("raw", INVISIBLE, ids=ascii)
def test_content_with_no_visible_character_is_refused(raw: str) -> None:
    refused = prepare_content(raw, 1000)
    assert isinstance(refused, Rejection), ascii(refused)
    assert refused.status is MemoryStatus.INVALID_CONTENT
    assert "visible" in refused.message
    assert "empty string" in refused.message  # how to delete instead


@pytest.mark.parametrize(
    "raw",
    [
        "a\u200b",  # one visible character is enough
        "\u200bx\u200b",
        "e\u0301",  # a mark on a letter
        "\u2764\ufe0f",  # a symbol with its variation selector
        "\U0001f600",  # an emoji (So)
        "\u0e01",  # a Thai letter
        "\ue000",  # private use: a font may draw it
        "\U000323b0",  # unassigned in this Python's Unicode: perhaps a newer character
        "\u2800",  # BRAILLE PATTERN BLANK: a symbol, the empty cell
        "{\u200b}",  # braces are visible: sanitizing keeps them round what is not a word
        "-",
        "1",
    ],
    ids=ascii,
)
def test_content_with_a_visible_character_is_kept_as_written(raw: str) -> None:
    assert prepare_content(raw, 1000) == raw


@pytest.mark.parametrize("raw", ["", " ", "\u3000\u2028\u00a0\t\n"], ids=ascii)
def test_only_empty_or_blank_content_deletes(raw: str) -> None:
    assert prepare_content(raw, 1000) == ""
