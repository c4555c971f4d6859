r"""pysbd 0.3.4's sentence processing for English and Japanese, with its regexes compiled once.

pysbd hands about 1,500 distinct pattern strings to module-level ``re.sub`` / ``re.findall``;
Python's ``re`` cache holds 512, so it keeps recompiling (about 40 % of its CPU), and its
abbreviation pass runs one regex per listed abbreviation per line. :class:`FastProcessor`
replays pysbd's ``Processor.process`` step by step, in the same order, with the same pattern
strings (read from pysbd's own rule classes), changed only in ways that cannot change a
result:

* every pattern is compiled once (per language, or in a bounded cache for the patterns pysbd
  builds from the text);
* a rule whose pattern is a plain literal (``∯``, ``&ᓴ&``, ...) is ``str.replace``, which
  finds the same non-overlapping leftmost occurrences as ``re.sub``;
* a step is skipped when its pattern needs a character the text does not contain (each guard
  names the literal the pattern starts with or requires);
* the abbreviation pass skips a line, or one abbreviation, when no ``(^|\s)ABBR.`` occurs in
  it: every replacement that pass can make turns the period right after such an occurrence
  into ``∯`` (see :meth:`FastProcessor._abbreviations_in_line`).

It is only used with pysbd 0.3.4 (the version it was read from): with any other version
:func:`fast_processor` returns ``None`` and pysbd's own processor runs. The differential tests
in ``tests/test_segment_fast.py`` compare it with stock pysbd on every text the repository
ships plus generated ones.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["FAST_LANGUAGES", "PYSBD_VERSION", "FastProcessor", "fast_processor"]

PYSBD_VERSION = "0.3.4"
"""The pysbd release this module replays; any other version runs pysbd's own processor."""
FAST_LANGUAGES = ("en", "ja")
"""Languages replayed here (both use pysbd's standard processor and rules)."""

_Sub = Callable[[str], str]
_QUOTE = re.compile("[\"'“”]")  # QUOTATION_AT_END_OF_SENTENCE_REGEX needs one
_META = frozenset(".^$*+?{}[]|()")


def _literal(pattern: str) -> str | None:
    r"""The text a regex matches if it is a plain literal (``\(`` etc. allowed), else None."""
    out = []
    chars = iter(pattern)
    for c in chars:
        if c == "\\":
            nxt = next(chars, None)
            if nxt is None or (nxt.isascii() and nxt.isalnum()):
                return None  # \d, \s, \1, ...: not a literal
            out.append(nxt)
        elif c in _META:
            return None
        else:
            out.append(c)
    return "".join(out) or None


_Needs = str | re.Pattern[str] | None


def _has(needs: _Needs) -> Callable[[str], bool]:
    """A test that is False only for texts where a pattern needing ``needs`` cannot match.

    ``needs`` is a substring every match contains, or a (fast, literal-first) regex that finds
    something every match contains; None: always True.
    """
    if needs is None:
        return lambda _: True
    if isinstance(needs, str):
        return lambda s: needs in s
    return lambda s: needs.search(s) is not None


def _rule(pattern: str, replacement: str, *, needs: _Needs = None) -> _Sub:
    """``re.sub(pattern, replacement, s)`` as a function of ``s``.

    A literal pattern becomes ``str.replace`` with the template expanded once (``re.sub`` also
    replaces non-overlapping leftmost occurrences). ``needs`` (see :func:`_has`): texts without
    it are returned untouched, without running the regex.
    """
    compiled = re.compile(pattern)
    literal = _literal(pattern)
    if literal is not None:
        expanded = compiled.sub(replacement, literal)  # the one match: the template, expanded
        return lambda s: s.replace(literal, expanded) if literal in s else s
    if needs is None:
        return lambda s: compiled.sub(replacement, s)
    has = _has(needs)
    return lambda s: compiled.sub(replacement, s) if has(s) else s


def _rules(rules: Any, needs: dict[str, _Needs] | None = None) -> _Sub:
    """A ``Text(s).apply(*rules)`` of pysbd ``Rule`` objects; ``needs`` maps pattern -> guard.

    When every rule is a literal or has a substring guard, a text containing none of their
    first characters is returned at once: no rule can match it, so none changes it.
    """
    needs = needs or {}
    subs = [_rule(r.pattern, r.replacement, needs=needs.get(r.pattern)) for r in rules]
    firsts: set[str] = set()
    for r in rules:
        key = _literal(r.pattern) or needs.get(r.pattern)
        if not isinstance(key, str):
            firsts = set()
            break
        firsts.add(key[0])

    def run(s: str) -> str:
        for sub in subs:
            s = sub(s)
        return s

    if not firsts:
        return run
    return _if_any(tuple(firsts), run)


def _if_any(chars: tuple[str, ...], run: _Sub) -> _Sub:
    """``run`` for texts containing one of ``chars``; others are returned as they are."""
    one_of = re.compile("[" + "".join(map(re.escape, chars)) + "]")

    def guarded(s: str) -> str:
        # A character-class search is quickest on short texts (sentences), `in` on long ones.
        found = one_of.search(s) if len(s) < 200 else any(c in s for c in chars)
        return run(s) if found else s

    return guarded


def _g(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A guard: a literal-first regex (fast to search) finding what a slower pattern needs."""
    return re.compile(pattern, flags)


@functools.lru_cache(maxsize=2048)
def _compiled(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Patterns pysbd builds from the text (abbreviation variants as written): bounded cache."""
    return re.compile(pattern, flags)


# --- pysbd.punctuation_replacer.replace_punctuation -------------------------------------------

_ESCAPES = (("(", "\\("), (")", "\\)"), ("[", "\\["), ("]", "\\]"), ("-", "\\-"))
_SUBSTITUTES = (
    (".", "∯"),
    ("。", "&ᓰ&"),
    ("．", "&ᓱ&"),
    ("！", "&ᓳ&"),
    ("!", "&ᓴ&"),
    ("?", "&ᓷ&"),
    ("？", "&ᓸ&"),
)
_UNESCAPES = (("\\(", "("), ("\\)", ")"), ("\\[", "["), ("\\]", "]"), ("\\-", "-"))


def replace_punctuation(match: re.Match[str], match_type: str | None = None) -> str:
    """The ``replace_punctuation`` of pysbd: its literal rules in order, as ``str.replace``."""
    text = match.group()
    for old, new in _ESCAPES:
        text = text.replace(old, new)
    for old, new in _SUBSTITUTES:
        text = text.replace(old, new)
    if match_type != "single":
        text = text.replace("'", "&⎋&")
    for old, new in _UNESCAPES:
        text = text.replace(old, new)
    return text


# --- the processor -----------------------------------------------------------------------------


class _Rules:
    """Everything pysbd's processor uses for one language, compiled once."""

    def __init__(self, code: str) -> None:
        from pysbd.abbreviation_replacer import AbbreviationReplacer
        from pysbd.between_punctuation import BetweenPunctuation
        from pysbd.exclamation_words import ExclamationWords
        from pysbd.languages import Language
        from pysbd.lists_item_replacer import ListItemReplacer as Li
        from pysbd.processor import Processor

        lang = Language.get_language_code(code)
        # Only the standard pipeline is replayed: no language-specific processor.
        assert not hasattr(lang, "Processor") or lang.Processor is Processor
        self.lang = lang
        self.code = code
        self.punctuations = tuple(lang.Punctuations)
        replacer = getattr(lang, "AbbreviationReplacer", AbbreviationReplacer)
        self.between_cls = getattr(lang, "BetweenPunctuation", BetweenPunctuation)
        self.standard_between = self.between_cls.replace is BetweenPunctuation.replace
        assert self.standard_between or code == "ja"  # Japanese's own: parens and quotes only
        self._lists(Li)
        self._abbreviations(lang, replacer)
        self._processor(lang, ExclamationWords)
        self._between(BetweenPunctuation)

    def _lists(self, Li: Any) -> None:  # noqa: N803 (pysbd's ListItemReplacer)
        self.li_alpha_periods = re.compile(Li.ALPHABETICAL_LIST_WITH_PERIODS)
        self.li_alpha_periods_has = _has(_g(r"\.(?:(?<=^[a-z]\.)|(?<=\s[a-z]\.))"))  # a. b.
        self.li_alpha_parens = re.compile(Li.ALPHABETICAL_LIST_WITH_PARENS)
        self.li_alpha_parens_has = _has(_g(r"\)(?<=[a-z]\))"))  # a) (b)
        self.li_letters_periods = re.compile(Li.ALPHABETICAL_LIST_LETTERS_AND_PERIODS_REGEX, re.I)
        self.li_letters_parens = re.compile(Li.EXTRACT_ALPHABETICAL_LIST_LETTERS_REGEX, re.I)
        self.li_numbered_1 = re.compile(Li.NUMBERED_LIST_REGEX_1)
        self.li_numbered_2 = re.compile(Li.NUMBERED_LIST_REGEX_2)
        self.li_numbered_1_has = _has(_g(r"\.(?<=\d\.)(?=\s|\))"))  # 1. 2.
        self.li_numbered_parens = re.compile(Li.NUMBERED_LIST_PARENS_REGEX)
        self.li_numbered_parens_has = _has(_g(r"\)(?<=\d\))(?=\s)"))  # 1) 2)
        self.li_roman_parens = re.compile(Li.ROMAN_NUMERALS_IN_PARENTHESES)
        self.li_period_block = re.compile("♨.+(\n|\r).+♨")
        self.li_for_number = re.compile(r"for\s\d{1,2}♨\s[a-z]")
        self.li_parens_block = re.compile("☝.+\n.+☝|☝.+\r.+☝")
        self.li_space_periods = _rules(
            [Li.SpaceBetweenListItemsFirstRule, Li.SpaceBetweenListItemsSecondRule]
        )
        self.li_space_parens = _rules([Li.SpaceBetweenListItemsThirdRule])
        self.li_substitute_period = _rules([Li.SubstituteListPeriodRule])
        self.li_marker = _rules([Li.ListMarkerRule])
        self.roman = Li.ROMAN_NUMERALS
        self.latin = Li.LATIN_NUMERALS

    def _abbreviations(self, lang: Any, replacer: Any) -> None:
        abbr = lang.Abbreviation
        single = lang.SingleLetterAbbreviationRules
        assert single.All == [
            single.SingleUpperCaseLetterAtStartOfLineRule,
            single.SingleUpperCaseLetterRule,
        ]
        self.abbr_first = _rules(
            [
                lang.PossessiveAbbreviationRule,
                lang.KommanditgesellschaftRule,
                *lang.SingleLetterAbbreviationRules.All,
            ],
            {
                lang.PossessiveAbbreviationRule.pattern: ".'s",
                lang.KommanditgesellschaftRule.pattern: "Co.",
                single.SingleUpperCaseLetterAtStartOfLineRule.pattern: _g(r"\.(?<=^[A-Z]\.)"),
                single.SingleUpperCaseLetterRule.pattern: _g(r"\.(?<=\s[A-Z]\.)"),
            },
        )
        self.abbreviations = [a.strip() for a in abbr.ABBREVIATIONS]
        self.prepositive = abbr.PREPOSITIVE_ABBREVIATIONS
        self.number_abbr = abbr.NUMBER_ABBREVIATIONS
        # All abbreviations of each length, as pysbd's findall has them (case-insensitive,
        # unescaped), to find where they stand before a "." (the per-abbreviation patterns are
        # compiled on first use: most never are, and compiling all of them took 70 ms).
        self.abbr_lengths = sorted({len(s) for s in self.abbreviations})
        self.abbr_of_length = {
            n: re.compile("|".join(s for s in self.abbreviations if len(s) == n), re.I)
            for n in self.abbr_lengths
        }
        self.multi_period = re.compile(lang.MULTI_PERIOD_ABBREVIATION_REGEX, re.I)
        self.multi_period_has = _has(_g(r"\.(?<=[a-z]\.)(?=[a-z]\.)", re.I))  # a.b.
        self.am_pm = _rules(lang.AmPmRules.All, {r.pattern: "∯" for r in lang.AmPmRules.All})
        starters = "|".join(rf"(?=\s{word}\s)" for word in replacer.SENTENCE_STARTERS)
        self.abbr_boundary = re.compile(
            rf"(U∯S|U\.S|U∯K|E∯U|E\.U|U∯S∯A|U\.S\.A|I|i.v|I.V)∯({starters})"
        )

    def _processor(self, lang: Any, ExclamationWords: Any) -> None:  # noqa: N803
        numbers = lang.Numbers
        assert numbers.All[0] is numbers.PeriodBeforeNumberRule  # r"\.(?=\d)", fast
        digit_period = _g(r"\.(?<=\d\.)")  # the others all need a digit before the "."
        self.numbers = _rules(numbers.All, {r.pattern: digit_period for r in numbers.All[1:]})
        self.continuous = re.compile(lang.CONTINUOUS_PUNCTUATION_REGEX)
        self.numbered_reference = re.compile(lang.NUMBERED_REFERENCE_REGEX)
        # It needs "." or "∯" after a non-digit non-space, then a digit or "[".
        self.numbered_reference_needs = (
            _g(r"\.(?<=[^\d\s]\.)(?=[\[\d])"),
            _g(r"∯(?<=[^\d\s]∯)(?=[\[\d])"),
        )
        self.periods_rules = _rules(
            [
                lang.Abbreviation.WithMultiplePeriodsAndEmailRule,
                lang.GeoLocationRule,
                lang.FileFormatRule,
            ],
            {
                lang.Abbreviation.WithMultiplePeriodsAndEmailRule.pattern: _g(
                    r"\.(?<=[a-zA-Z0-9_]\.)(?=[a-zA-Z0-9_])"
                ),
                lang.GeoLocationRule.pattern: "°",
                lang.FileFormatRule.pattern: _g(r"\.(?<=\s\.)"),
            },
        )
        self.parens_between_quotes = re.compile(lang.PARENS_BETWEEN_DOUBLE_QUOTES_REGEX)
        self.parens_between_quotes_has = _has(_g(r'\((?<=["\”]\s\()'))
        self.space_before_paren = re.compile(r"\s(?=\()")
        self.space_after_paren = re.compile(r"(?<=\))\s")
        ellipsis = lang.EllipsisRules
        self.line_rules = _rules(
            [lang.SingleNewLineRule, *ellipsis.All],
            {
                lang.SingleNewLineRule.pattern: "\n",
                ellipsis.ThreeSpaceRule.pattern: _g(r"\.(?<=\s\.)"),
                ellipsis.FourSpaceRule.pattern: _g(r"\.(?=\s\.)"),
                ellipsis.FourConsecutiveRule.pattern: "...",
                ellipsis.ThreeConsecutiveRule.pattern: "...",
            },
        )
        self.sub_symbols = _rules(lang.SubSymbolsRules.All)
        self.reinsert_ellipsis = _rules(lang.ReinsertEllipsisRules.All)
        self.sub_single_quote = _rules([lang.SubSingleQuoteRule])
        self.alpha_only = re.compile(r"\A[a-zA-Z]*\Z")
        self.quote_at_end = re.compile(lang.QUOTATION_AT_END_OF_SENTENCE_REGEX)
        self.split_quote_at_end = re.compile(lang.SPLIT_SPACE_QUOTATION_AT_END_OF_SENTENCE_REGEX)
        self.exclamation_words = re.compile(ExclamationWords.EXCLAMATION_REGEX)
        # Every exclamation word has one of these (checked here, so a new word cannot slip by).
        self.exclamation_chars = ("!", "ǃ")
        assert all(
            any(c in w for c in self.exclamation_chars) for w in ExclamationWords.EXCLAMATION_WORDS
        )
        double = lang.DoublePunctuationRules
        self.double_punctuation = re.compile(double.DoublePunctuation)
        self.double_rules = _rules(double.All)
        self.question_exclamation = _rules(
            [lang.QuestionMarkInQuotationRule, *lang.ExclamationPointRules.All],
            {
                lang.QuestionMarkInQuotationRule.pattern: "?",
                **{r.pattern: "!" for r in lang.ExclamationPointRules.All},
            },
        )
        self.colon_numbers = (
            _rules([lang.ReplaceColonBetweenNumbersRule])
            if hasattr(lang, "ReplaceColonBetweenNumbersRule")
            else None
        )
        self.comma_boundary = (
            _rules([lang.ReplaceNonSentenceBoundaryCommaRule])
            if hasattr(lang, "ReplaceNonSentenceBoundaryCommaRule")
            else None
        )
        self.final_exclamation = re.compile(r"&ᓴ&$")
        self.sentence_boundary = re.compile(lang.SENTENCE_BOUNDARY_REGEX)

    def _between(self, bp: Any) -> None:
        """BetweenPunctuation: the standard steps, and Japanese's parens and quotes."""
        self.bp_leading_apostrophe = re.compile(bp.WORD_WITH_LEADING_APOSTROPHE)
        self.bp_apostrophe_space = re.compile(r"'\s")
        self.bp_single = re.compile(bp.BETWEEN_SINGLE_QUOTES_REGEX)
        self.bp_steps: list[tuple[str, re.Pattern[str]]] = [  # (needed literal, pattern)
            ("‘", re.compile(bp.BETWEEN_SINGLE_QUOTE_SLANTED_REGEX)),
            ('"', re.compile(bp.BETWEEN_DOUBLE_QUOTES_REGEX_2)),
            ("[", re.compile(bp.BETWEEN_SQUARE_BRACKETS_REGEX_2)),
            ("(", re.compile(bp.BETWEEN_PARENS_REGEX_2)),
            ("«", re.compile(bp.BETWEEN_QUOTE_ARROW_REGEX_2)),
            ("--", re.compile(bp.BETWEEN_EM_DASHES_REGEX_2)),
            ("“", re.compile(bp.BETWEEN_QUOTE_SLANTED_REGEX_2)),
        ]
        # pysbd's Japanese BetweenPunctuation has these two inline (same strings here).
        self.bp_ja_steps: list[tuple[str, re.Pattern[str]]] = [
            ("（", re.compile(r"（(?=(?P<tmp>[^（）]+|\\{2}|\\.)*)(?P=tmp)）")),
            ("「", re.compile(r"「(?=(?P<tmp>[^「」]+|\\{2}|\\.)*)(?P=tmp)」")),
        ]


class FastProcessor:
    """pysbd's ``Processor(text, lang).process()`` for one language (see the module doc)."""

    def __init__(self, rules: _Rules, text: str) -> None:
        self.r = rules
        self.text = text

    def process(self) -> Any:
        """The sentences pysbd's processor gives for the text (before char-span lookup)."""
        r = self.r
        if not self.text:
            return self.text
        text = self.text.replace("\n", "\r")
        text = self._add_line_break(text)
        text = self._replace_abbreviations(text)
        if "." in text:  # every number rule matches a "."
            text = r.numbers(text)
        if "!!" in text or "!?" in text or "?!" in text or "??" in text:  # it needs 3 of them
            text = r.continuous.sub(_continuous_puncs, text)
        if any(needs.search(text) for needs in r.numbered_reference_needs):
            text = r.numbered_reference.sub(r"∯\2\r\7", text)
        text = r.periods_rules(text)
        return self._split_into_segments(text)

    # --- ListItemReplacer(text).add_line_break() ---

    def _add_line_break(self, text: str) -> str:
        r = self.r
        # Each step is a no-op when its findall finds nothing (the guards: what a match needs).
        for roman in (False, True):
            if r.li_alpha_periods_has(text):
                text = self._iterate_alphabet(text, r.li_alpha_periods, parens=False, roman=roman)
            if r.li_alpha_parens_has(text):
                text = self._iterate_alphabet(text, r.li_alpha_parens, parens=True, roman=roman)
        # format_numbered_list_with_periods
        if r.li_numbered_1_has(text):
            text = self._scan_lists(text, r.li_numbered_1, r.li_numbered_2, "♨", strip=True)
        if "♨" in text and not r.li_period_block.search(text) and not r.li_for_number.search(text):
            text = r.li_space_periods(text)
        text = r.li_substitute_period(text)
        # format_numbered_list_with_parens
        for _ in range(2):  # pysbd scans twice
            if r.li_numbered_parens_has(text):
                text = self._scan_lists(text, r.li_numbered_parens, r.li_numbered_parens, "☝")
        if "☝" in text and not r.li_parens_block.search(text):
            text = r.li_space_parens(text)
        return r.li_marker(text)

    def _scan_lists(
        self,
        text: str,
        regex1: re.Pattern[str],
        regex2: re.Pattern[str],
        replacement: str,
        strip: bool = False,
    ) -> str:
        list_array = list(map(int, regex1.findall(text)))
        for ind, item in enumerate(list_array):
            if (ind < len(list_array) - 1 and item + 1 == list_array[ind + 1]) or (
                ind > 0
                and (
                    ((item - 1) == list_array[ind - 1])
                    or ((item == 0) and (list_array[ind - 1] == 9))
                    or ((item == 9) and (list_array[ind - 1] == 0))
                )
            ):
                text = _substitute_list_items(text, regex2, item, strip, replacement)
        return text

    def _iterate_alphabet(
        self, text: str, regex: re.Pattern[str], *, parens: bool, roman: bool
    ) -> str:
        alphabet = self.r.roman if roman else self.r.latin
        list_array = [i for i in regex.findall(text) if i in alphabet]
        for ind, each in enumerate(list_array):
            if ind == len(list_array) - 1:
                text = self._last_item(text, each, ind, alphabet, list_array, parens=parens)
            else:
                text = self._other_item(text, each, ind, alphabet, list_array, parens=parens)
        return text

    def _last_item(
        self, text: str, a: str, i: int, alphabet: list[str], array: list[str], *, parens: bool
    ) -> str:
        if (
            (len(alphabet) == 0) & (len(array) == 0)
            or (array[i - 1] not in alphabet)
            or (a not in alphabet)
        ):
            return text
        if abs(alphabet.index(array[i - 1]) - alphabet.index(a)) != 1:
            return text
        return self._alphabet_list(text, a, parens)

    def _other_item(
        self, text: str, a: str, i: int, alphabet: list[str], array: list[str], *, parens: bool
    ) -> str:
        if (
            (len(alphabet) == 0) & (len(array) == 0)
            or (array[i - 1] not in alphabet)
            or (a not in alphabet)
            or (array[i + 1] not in alphabet)
        ):
            return text
        if (
            alphabet.index(array[i + 1]) - alphabet.index(a) != 1
            and abs(alphabet.index(array[i - 1]) - alphabet.index(a)) != 1
        ):
            return text
        return self._alphabet_list(text, a, parens)

    def _alphabet_list(self, text: str, a: str, parens: bool) -> str:
        if parens:
            return self.r.li_letters_parens.sub(partial(_replace_alphabet_paren, val=a), text)
        return self.r.li_letters_periods.sub(partial(_replace_letter_period, val=a), text)

    # --- AbbreviationReplacer(text, lang).replace() ---

    def _replace_abbreviations(self, text: str) -> str:
        r = self.r
        text = r.abbr_first(text)
        text = "".join(self._abbreviations_in_line(line) for line in text.splitlines(True))
        if r.multi_period_has(text):
            text = r.multi_period.sub(_multi_period, text)
        text = r.am_pm(text)
        if "∯" in text:  # the pattern needs one
            text = r.abbr_boundary.sub("\\1.", text)
        return text

    def _abbreviations_in_line(self, text: str) -> str:
        r"""The ``search_for_abbreviations_in_string`` of pysbd, minus what cannot change a line.

        Each replacement it makes (``replace_prepositive_abbr``, ``replace_pre_number_abbr``,
        ``replace_period_of_abbr``) turns a "." into "∯" where the "." follows whitespace (or
        the line's start) and a found variant ``am`` of the abbreviation, so it needs
        ``(^|\s)ABBR\.`` (case-insensitive, ABBR as pysbd writes it) in the current line. The
        pass only ever turns "." into "∯", and such a match in the current line is one in the
        line as given, too. So: no such match for any abbreviation -> the line is returned as
        is; none for one abbreviation -> its iteration is a no-op and skipped; and a found
        variant whose ``am.strip() + "."`` is absent matches none of the three patterns.
        """
        r = self.r
        spots = self._abbreviation_spots(text)
        if not spots:
            return text
        line = text
        lowered = text.lower()
        for stripped in r.abbreviations:
            if stripped not in lowered:
                continue
            alone, size = _compiled(stripped, re.I), len(stripped)
            if not any(
                end - start == size and alone.fullmatch(line, start, end) for start, end in spots
            ):
                continue
            # pysbd's own patterns, as it builds them
            abbrev_match = _compiled(rf"(?:^|\s|\r|\n){stripped}", re.I).findall(text)
            if not abbrev_match:
                continue
            char_array = _compiled(r"(?<={" + str(re.escape(stripped)) + "} ).{1}").findall(text)
            for ind, match in enumerate(abbrev_match):
                text = self._scan_for_replacements(text, match, ind, char_array)
        return text

    def _abbreviation_spots(self, text: str) -> list[tuple[int, int]]:
        r"""Spans ``(start, end)`` of the line where some abbreviation stands before a ".".

        That is: at the line's start or after whitespace, matching the abbreviation as pysbd's
        findall does (case-insensitive, unescaped; one character per pattern character), and
        followed by a "." at ``end``. (``str.isspace`` is the regex ``\s``, code point for code
        point; a test checks it.)
        """
        r = self.r
        spots = []
        end = text.find(".")
        while end >= 0:
            for size in r.abbr_lengths:
                start = end - size
                if start < 0:
                    break
                if start and not text[start - 1].isspace():
                    continue
                if r.abbr_of_length[size].fullmatch(text, start, end):
                    spots.append((start, end))
            end = text.find(".", end + 1)
        return spots

    def _scan_for_replacements(self, txt: str, am: str, ind: int, char_array: list[str]) -> str:
        try:
            char = char_array[ind]
        except IndexError:
            char = ""
        key = am.strip()
        if key + "." not in txt:  # all three patterns need it
            return txt
        lower = key.lower()
        prepositive = lower in self.r.prepositive
        if not str(char).isupper() or prepositive:
            if prepositive:
                pattern = rf"(?<=\s{key})\.(?=(\s|:\d+))"
            elif lower in self.r.number_abbr:
                pattern = rf"(?<=\s{key})\.(?=(\s\d|\s+\())"
            else:
                escaped = re.escape(key)
                pattern = rf"(?<=\s{escaped})\.(?=((\.|\:|-|\?|,)|(\s([a-z]|I\s|I'm|I'll|\d|\())))"
            txt = _compiled(pattern).sub("∯", " " + txt)[1:]
        return txt

    # --- Processor.split_into_segments() ---

    def _split_into_segments(self, text: str) -> list[str]:
        r = self.r
        if r.parens_between_quotes_has(text):  # check_for_parens_between_quotes
            text = r.parens_between_quotes.sub(self._paren_replace, text)
        sents: list[Any] = [s for s in text.split("\r") if s]
        sents = [r.line_rules(s) for s in sents]
        sents = _flatten([self._check_for_punctuation(s) for s in sents])
        out: list[str] = []
        for sent in sents:
            post = self._post_process(r.sub_symbols(sent))
            if post and isinstance(post, str):
                out.append(post)
            elif isinstance(post, list):
                out.extend(post)
        return [r.sub_single_quote(s) for s in out]

    def _paren_replace(self, match: re.Match[str]) -> str:
        sub1 = self.r.space_before_paren.sub("\r", match.group())
        return self.r.space_after_paren.sub("\r", sub1)

    def _post_process(self, txt: str) -> Any:
        r = self.r
        if len(txt) > 2 and r.alpha_only.search(txt):
            return txt
        txt = r.reinsert_ellipsis(txt)
        if _QUOTE.search(txt) and r.quote_at_end.search(txt):  # it needs a quote
            return r.split_quote_at_end.split(txt)
        return txt.replace("\n", "").strip()

    def _check_for_punctuation(self, txt: str) -> Any:
        if any(p in txt for p in self.r.punctuations):
            return self._process_text(txt)
        return [txt]

    def _process_text(self, txt: str) -> list[str]:
        r = self.r
        if txt[-1] not in r.punctuations:
            txt += "ȸ"
        if any(c in txt for c in r.exclamation_chars):
            txt = r.exclamation_words.sub(replace_punctuation, txt)
        txt = self._between_punctuation(txt)
        if not r.double_punctuation.match(txt):
            txt = r.double_rules(txt)
        txt = r.question_exclamation(txt)
        if "(" in txt:
            txt = r.li_roman_parens.sub(r"&✂&\1&⌬&", txt)
        # sentence_boundary_punctuation
        if r.colon_numbers is not None:
            txt = r.colon_numbers(txt)
        if r.comma_boundary is not None:
            txt = r.comma_boundary(txt)
        if "&ᓴ&" in txt:
            txt = r.final_exclamation.sub("!", txt)
        return [m.group() for m in r.sentence_boundary.finditer(txt)]

    def _between_punctuation(self, txt: str) -> str:
        r = self.r
        if not r.standard_between:  # Japanese: parens and quotes only
            for needed, pattern in r.bp_ja_steps:
                if needed in txt:
                    txt = pattern.sub(replace_punctuation, txt)
            return txt
        if "'" in txt and not (
            r.bp_leading_apostrophe.search(txt) and not r.bp_apostrophe_space.search(txt)
        ):
            txt = r.bp_single.sub(partial(replace_punctuation, match_type="single"), txt)
        for needed, pattern in r.bp_steps:
            if needed in txt:
                txt = pattern.sub(replace_punctuation, txt)
        return txt


def _continuous_puncs(match: re.Match[str]) -> str:
    return match.group().replace("!", "&ᓴ&").replace("?", "&ᓷ&")


def _multi_period(match: re.Match[str]) -> str:
    return match.group().replace(".", "∯")


def _substitute_list_items(
    text: str, regex: re.Pattern[str], each: int, strip: bool, replacement: str
) -> str:
    def replace_item(match: re.Match[str]) -> str:
        found = match.group()
        if strip:
            found = str(found).strip()
        chomped = found if len(found) == 1 else found.strip(".])")
        if str(each) == chomped:
            return f"{each}{replacement}"
        return str(found)

    return regex.sub(replace_item, text)


def _replace_letter_period(match: re.Match[str], val: str | None = None) -> str:
    found = match.group()
    if found.strip(".") == val:
        return "\r{}∯".format(found.strip("."))
    return found


def _replace_alphabet_paren(match: re.Match[str], val: str | None = None) -> str:
    found = match.group()
    if "(" in found:
        if found.strip("(") == val:
            return "\r&✂&{}".format(found.strip("("))
        return found
    if found == val:
        return f"\r{found}"
    return found


def _flatten(sents: list[Any]) -> list[Any]:
    """The ``rm_none_flatten`` of pysbd: drop empty items, unpack nested lists one level."""
    sents = [s for s in sents if s]
    if not any(isinstance(s, list) for s in sents):
        return sents
    out: list[Any] = []
    for sent in sents:
        if isinstance(sent, list):
            out.extend(sent)
        else:
            out.append(sent)
    return out


@functools.cache
def _language_rules(code: str) -> _Rules:
    return _Rules(code)


def fast_processor(code: str) -> Callable[[str], FastProcessor] | None:
    """A factory of :class:`FastProcessor` for ``code``, or None to use pysbd's own processor.

    None for languages other than :data:`FAST_LANGUAGES` and for any pysbd other than
    :data:`PYSBD_VERSION` (the rules replayed here are that release's).
    """
    import pysbd

    if code not in FAST_LANGUAGES or pysbd.__version__ != PYSBD_VERSION:
        return None
    rules = _language_rules(code)
    return lambda text: FastProcessor(rules, text)
